"""The book's experiments, each with its settings (presets), its run and its command-line arguments.

``shared`` holds what they share (arguments, the result file and resume, summaries over seeds).
An experiment imports everything below it and never another experiment. The package ``__init__``s
here import nothing, so that ``python -m capsedu --help`` needs no torch.
"""
