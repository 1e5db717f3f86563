"""An experiment's runs as tidy pandas tables: one row per run, per epoch, per test item.

``load(name, preview)`` makes the one choice a chapter needs: the stored run ``results/<name>``
where it is there and usable, else the live preview (the line saying why is printed). The tables
carry which it is as ``df.attrs["origin"]`` and an ``origin`` column (``source`` is taken: the
settings' data source). Nothing here writes.
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Union

import numpy as np
import pandas as pd

from capsedu.runtime import results
from capsedu.runtime.stored import NAME_KEYS

__all__ = ["load", "runs_table", "epochs_table", "items_table", "PREVIEW", "RISING"]

PREVIEW = "live preview"
# The book's one convergence bar: a curve whose test accuracy still gains more than this per epoch
# at the end (2 test digits in 1,000) is still rising, and its last number likely below a longer run's.
RISING = 0.002
PROVENANCE = ("command", "date", "hardware", "device", "torch", "python", "capsedu", "preset")


def load(name: str, preview: Callable[[], Dict], check: Optional[Callable[[Dict], object]] = None) -> Dict:
    """The stored run ``results/<name>`` (``check(data)`` may refuse it), else ``preview()`` after one
    printed line saying why; ``data["origin"]`` says which."""
    data, why = results.stored_or_preview(name, check)
    if data is None:
        print(why)
        return {**preview(), "origin": PREVIEW}
    return {**data, "origin": f"stored run results/{name}"}


def _scalars(mapping: Mapping) -> Dict:
    return {k: v for k, v in mapping.items() if v is None or isinstance(v, (str, bool, int, float))}


def _key(record: Mapping) -> Dict:
    """The record's name (under its own key: model, method or variant) and seed."""
    return {**{k: record[k] for k in NAME_KEYS if k in record}, "seed": record["seed"]}


def _frame(rows, data: Mapping) -> pd.DataFrame:
    df = pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows
    df["origin"] = df.attrs["origin"] = data.get("origin", PREVIEW)
    return df


def runs_table(data: Mapping) -> pd.DataFrame:
    """One row per run: its name and seed, its scalar fields, then the settings and the provenance
    that the record does not name itself (a per-model setting such as ``epochs`` read for its model)."""
    settings, header = data["settings"], {k: data[k] for k in PROVENANCE if k in data}
    rows = []
    for record in data["runs"]:
        name = next((record[k] for k in NAME_KEYS if k in record), None)
        own = {k: v.get(name) for k, v in settings.items() if isinstance(v, dict)}
        row = {**header, **_scalars(settings), **own, **_scalars(record)}
        rows.append({**_key(record), **row})
    return _frame(rows, data)


def epochs_table(data: Mapping) -> pd.DataFrame:
    """One row per (run, epoch): each epoch record's scalars, or each ``curve`` list's entry (epoch 1 first)."""
    rows = []
    for record in data["runs"]:
        if isinstance(record.get("epochs"), list):
            rows += [{**_key(record), **_scalars(e)} for e in record["epochs"]]
        elif isinstance(record.get("curve"), dict):
            curve = record["curve"]
            length = max(len(v) for v in curve.values())
            rows += [{**_key(record), "epoch": i + 1, **{k: v[i] for k, v in curve.items() if i < len(v)}}
                     for i in range(length)]
    return _frame(rows, data)


def items_table(data: Mapping, n_items: Union[int, Mapping[str, int]]) -> pd.DataFrame:
    """One row per (run, test set, item) for the runs that stored their ``misses``: ``right`` is 0 for a
    missed item, else 1. ``n_items``: the size of every test set, or one size per test set's name."""
    parts = []
    for record in data["runs"]:
        for test, missed in (record.get("misses") or {}).items():
            n = n_items if isinstance(n_items, int) else n_items[test]
            right = np.ones(n, dtype=np.int8)
            right[np.asarray(missed, dtype=int)] = 0            # an index past n raises IndexError
            parts.append(pd.DataFrame({**_key(record), "test": test, "item": np.arange(n), "right": right}))
    empty = pd.DataFrame(columns=["seed", "test", "item", "right"])
    return _frame(pd.concat(parts, ignore_index=True) if parts else empty, data)
