"""``python -m capsedu``: see ``capsedu.cli``."""
import os
import sys

if __name__ == "__main__":
    try:
        from .cli import main
        code = main()
    except KeyboardInterrupt:  # Ctrl-C while the command line itself is imported
        code = 130
    if code == 130:  # interrupted: leave at once, so that no late finaliser turns the exit into a signal
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
