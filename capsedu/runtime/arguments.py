"""Command-line pieces every command shares (no torch): a parser whose errors are one line, number types.

A bad argument exits with code 2 and one line that names what was expected and the allowed range;
every number has bounds, so no value reaches an overflow or a huge allocation.
"""
from __future__ import annotations

import argparse

__all__ = ["CommandParser", "HelpFormatter", "int_in", "float_in", "positive_int", "seed_int",
           "epochs_int", "threads_int", "batch_int", "MAX_INT", "MAX_SEED"]


class CommandParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (no usage block) and exits with code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones (None, False)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


MAX_INT = 10**9       # counts (images, pairs, limits): beyond this the run could not allocate them
MAX_SEED = 2**31 - 1  # seeds: what every generator takes, with room for seed * 10,000 + epoch


def _number(kind, ok, what, allowed):
    """An argparse type: ``kind(text)`` that must satisfy ``ok``, else one line naming the allowed range."""
    def parse(text):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or value != value or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} (allowed: {allowed})")
        return value
    parse.__name__ = what.replace(" ", "_")
    return parse


def int_in(low: int, high: int, what: str = None):
    """An integer type in [low, high], e.g. ``int_in(1, 10_000)`` for epochs."""
    what = what or ("a positive integer" if low == 1 else "an integer >= 0" if low == 0 else "an integer")
    return _number(int, lambda v: low <= v <= high, what, f"{low} to {high:,}")


def float_in(low: float, high: float, what: str, low_open: bool = True):
    """A number in (low, high] (``low_open``) or [low, high]."""
    ok = (lambda v: low < v <= high) if low_open else (lambda v: low <= v <= high)
    return _number(float, ok, what, f"{'more than ' if low_open else ''}{low:g} to {high:g}")


positive_int = int_in(1, MAX_INT)
seed_int = int_in(0, MAX_SEED)
epochs_int = int_in(1, 100_000)
threads_int = int_in(1, 1024)
batch_int = int_in(1, 1 << 20)
