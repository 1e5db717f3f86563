"""Helpers shared by the command-line tests (plain functions; pytest puts this folder on sys.path)."""
from pathlib import Path

from capsedu import cli


def run(capsys, *argv):
    """cli.main in this process: (exit code, stdout, the stderr lines)."""
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def snapshot(folder: Path):
    """Every path below ``folder`` with its bytes (None for a folder): to show a command changed nothing."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}
