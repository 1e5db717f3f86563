"""Command-line pieces every command shares (no torch): a parser whose errors are one line, number types.

A bad argument exits with code 2 and one line that names what was expected.
"""
from __future__ import annotations

import argparse

__all__ = ["CommandParser", "HelpFormatter", "positive_int", "non_negative_int", "positive_float",
           "non_negative_float"]


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


def _number(kind, ok, what):
    """An argparse type: ``kind(text)`` that must satisfy ``ok``, else one clear error line."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
