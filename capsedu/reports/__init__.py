"""What chapter 5 still reads from here: the statistics of ``stats``.

The experiments write runs (``capsedu.experiments``); this folder reads them. It may import every other
folder; none imports it. Nothing is imported here, so that ``python -m capsedu --help`` needs no torch.
"""
