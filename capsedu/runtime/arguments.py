"""Settings declared once (no torch): ``setting`` marks a config dataclass field with its bounds
or choices and, given a help line, its command-line option; ``check_config`` checks a config's
fields and ``add_options`` makes their options. A bad argument exits with code 2 and one line
(``CommandParser``) naming the allowed range; every number has bounds, so no value reaches an
overflow or a huge allocation.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import typing

from capsedu import AMP_CHOICES

__all__ = ["CommandParser", "HelpFormatter", "number", "setting", "check_config", "add_options",
           "MAX_INT", "MAX_SEED"]

MAX_INT = 10**9       # counts (images, pairs, limits): beyond this the run could not allocate them
MAX_SEED = 2**31 - 1  # seeds: what every generator takes, with room for seed * 10,000 + epoch


class CommandParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (no usage block) and exits with code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones (None, False)."""

    def _get_help_string(self, action):
        empty = action.default is None or action.default is False
        return action.help if empty else super()._get_help_string(action)


def number(kind: type, low, high, low_open: bool = False):
    """An argparse type: ``kind(text)`` in [low, high] ((low, high] with ``low_open``)."""
    form = ",d" if kind is int else "g"
    allowed = f"{'more than ' if low_open else ''}{low:{form}} to {high:{form}}"

    def parse(text):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = math.nan                                    # fails every comparison
        if not (low < value if low_open else low <= value) or not value <= high:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} (allowed: {allowed})")
        return value
    return parse


def setting(default, help=None, low=1, high=MAX_INT, **meta):
    """A config field: a number in [low, high] (``low_open=True``: above ``low``), or one of
    ``choices=``; with ``help``, an option (``--batch-size`` for ``batch_size``, or ``flag=``)."""
    return dataclasses.field(default=default, metadata=dict(help=help, low=low, high=high, **meta))


def _kind(hint):
    """(the type of one value, whether the field holds a tuple of them, whether it may be None)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return args[0], True, False
    if origin is typing.Union:  # Optional[X] is X or None; epochs as an int or one per model: its own check
        return (args[0], False, True) if type(None) in args else (None, False, False)
    return hint, False, False


def _fits(value, kind, spec) -> bool:
    if spec["choices"] is not None or kind not in (int, float):
        return value in spec["choices"] if spec["choices"] is not None else kind is not bool or isinstance(value, bool)
    low, high = spec["low"], spec["high"]
    number = not isinstance(value, bool) and isinstance(value, int if kind is int else (int, float))
    return number and (low < value if spec["low_open"] else low <= value) and value <= high and value < math.inf


def _what(kind, spec) -> str:
    low, high = spec["low"], spec["high"]
    if spec["choices"] is not None:
        return f"one of {tuple(spec['choices'])}"
    if kind is int:
        return f"an int in [{low}, {high:,}]"
    if kind is float:
        return "a positive number" if high == math.inf else \
            f"a finite number in {'(' if spec['low_open'] else '['}{low:g}, {high:g}]"
    return "True or False"


def check_config(config, names=None, bounds=None, fractions=()) -> None:
    """Each field of a config dataclass, by its type; a ValueError names the class's field, what it
    must be and what it got. Bounds and choices come from the field's ``setting``, else: ints in
    [1, ``MAX_INT``] (``bounds``: field -> (low, high); seeds in [0, ``MAX_SEED``]), floats positive
    (``fractions``: in [0, 1]), the first field (the grid) distinct ``names``, ``source`` and ``amp``
    among theirs; tuples non-empty, seeds distinct."""
    bounds = {"seeds": (0, MAX_SEED), "test_seed": (0, MAX_SEED), **(bounds or {})}
    grid = dataclasses.fields(config)[0].name
    choices = {"source": ("sample", "full", "auto"), "amp": AMP_CHOICES, grid: names}
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        kind, many, optional = _kind(hints[f.name])
        if kind is None or optional and value is None:
            continue
        low, high = bounds.get(f.name, (0, 1) if f.name in fractions else (0, math.inf) if kind is float
                               else (1, MAX_INT))
        spec = {"low": low, "high": high, "choices": choices.get(f.name), **f.metadata}
        spec.setdefault("low_open", spec["high"] == math.inf)
        if not many:
            problem = None if _fits(value, kind, spec) else f"be {_what(kind, spec)}"
        elif spec["choices"] is not None:
            ok = isinstance(value, tuple) and value and len(set(value)) == len(value)
            problem = None if ok and all(_fits(v, kind, spec) for v in value) else \
                f"be distinct names from {tuple(spec['choices'])}"
        elif not isinstance(value, tuple) or not value or f.name == "seeds" and len(set(value)) < len(value):
            problem = "be a non-empty tuple" + (" of distinct values" if f.name == "seeds" else "")
        else:
            problem = None if all(_fits(v, kind, spec) for v in value) else f"hold numbers, each {_what(kind, spec)}"
        if problem is not None:
            raise ValueError(f"{type(config).__name__}.{f.name} must {problem}, got {value!r}")


def add_options(parser, kind: type, defaults: bool = False) -> None:
    """One option per field of the config dataclass ``kind`` that has a help line: a bounded number,
    a choice (one or more for a tuple field) or a switch (a bool); its default is the field's
    (``defaults``) or None (the preset's)."""
    hints = typing.get_type_hints(kind)
    for f in dataclasses.fields(kind):
        meta = f.metadata
        if meta.get("help") is None:
            continue
        one, many, _ = _kind(hints[f.name])
        flag, default = meta.get("flag", "--" + f.name.replace("_", "-")), f.default if defaults else None
        if one is bool:
            parser.add_argument(flag, dest=f.name, action="store_true", help=meta["help"])
        else:
            parser.add_argument(flag, dest=f.name, default=default, choices=meta.get("choices"),
                                nargs="+" if many else None, help=meta["help"],
                                type=number(one, meta["low"], meta["high"], meta.get("low_open", False))
                                if one in (int, float) else None)
