"""Command-line pieces every command shares (no torch): a parser whose errors are one line, number types,
and ``check_config``, the same bounds for the fields of an experiment's config dataclass.

A bad argument exits with code 2 and one line that names what was expected and the allowed range;
every number has bounds, so no value reaches an overflow or a huge allocation.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Dict, Optional, Sequence, Tuple

from capsedu.runtime.stored import _is_int

__all__ = ["CommandParser", "HelpFormatter", "int_in", "float_in", "positive_int", "seed_int",
           "epochs_int", "threads_int", "batch_int", "MAX_INT", "MAX_SEED", "check_config"]


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


def _what(value, kind: str, bounds, names, fraction: bool, distinct: bool) -> Optional[str]:
    """What ``value``, of type ``kind``, must be (or hold), or None if it is that."""
    low, high = bounds or (1, MAX_INT)
    if kind == "bool":
        return None if isinstance(value, bool) else "be True or False"
    if kind in ("int", "Optional[int]"):
        if kind == "Optional[int]" and value is None:
            return None
        none = " or None" if kind == "Optional[int]" else ""
        return None if _is_int(value) and low <= value <= high else f"be an int in [{low}, {high:,}]{none}"
    if kind == "float":
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if fraction:
            return None if number and 0 <= value <= 1 else "be a number in [0, 1]"
        if bounds:                                                      # a finite number in [low, high]
            return None if number and low <= value <= high and value < float("inf") else \
                f"be a finite number in [{low:g}, {high:g}]"
        return None if number and 0 < value < float("inf") else "be a positive number"
    if kind == "str":
        return None if names is None or value in names else f"be one of {tuple(names)}"
    if not kind.startswith("Tuple["):
        return None                                                     # checked by the config itself
    items = kind[len("Tuple["):-len(", ...]")]                          # a tuple of these
    if not isinstance(value, tuple) or not value or distinct and len(set(value)) != len(value):
        return f"be a non-empty tuple{' of distinct values' if distinct else ''}"
    if names is not None and any(v not in names for v in value):
        return f"be distinct names from {tuple(names)}"
    if items in ("int", "float") and any(_what(v, items, bounds, None, fraction, False) for v in value):
        return "hold numbers in [0, 1]" if fraction else f"hold ints in [{low}, {high:,}]" if items == "int" \
            else "hold positive numbers"
    return None


def check_config(config, names: Optional[Sequence[str]] = None, bounds: Optional[Dict[str, Tuple[int, int]]] = None,
                 fractions: Sequence[str] = (), choices: Optional[Dict[str, Sequence]] = None) -> None:
    """Each field of an experiment's config dataclass, by its type: ints in [1, ``MAX_INT``] (``bounds``: field ->
    (low, high)), Optional ints that or None, floats positive (``fractions``: in [0, 1]), bools; tuples non-empty;
    the grid's first field distinct ``names``; ``seeds`` distinct ints in [0, ``MAX_SEED``]; ``source``, ``amp`` and
    the fields of ``choices`` among theirs. A ValueError naming the class's field, what it must be and what it got."""
    bounds = {"seeds": (0, MAX_SEED), "test_seed": (0, MAX_SEED), **(bounds or {})}
    choices = {"source": ("sample", "full", "auto"), "amp": ("off", "auto", "bf16", "fp16"), **(choices or {})}
    hints = typing.get_type_hints(type(config))
    grid = next(f.name for f in dataclasses.fields(config))
    for f in dataclasses.fields(config):
        value, kind = getattr(config, f.name), str(hints[f.name]).replace("typing.", "")
        kind = {"<class 'int'>": "int", "<class 'float'>": "float", "<class 'str'>": "str",
                "<class 'bool'>": "bool", "Optional[int]": "Optional[int]", "Union[int, NoneType]": "Optional[int]"
                }.get(kind, kind)
        allowed = names if f.name == grid and f.name != "seeds" else choices.get(f.name)
        distinct = f.name in (grid, "seeds") or f.name in choices
        what = _what(value, kind, bounds.get(f.name), allowed, f.name in fractions, distinct)
        if what is not None:
            raise ValueError(f"{type(config).__name__}.{f.name} must {what}, got {value!r}")
