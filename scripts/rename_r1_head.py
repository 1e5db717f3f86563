"""Rename the stored one-iteration control's head from "capsule-su" (the 3-iteration head's name) to
"capsule-su-r1", its own name (run once on 2026-12-03, kept for the record).

    python scripts/rename_r1_head.py    # results/two_digits_r1/capsule-su-seed<k>.json -> capsule-su-r1-seed<k>.json

Only the head's name changes: the record's "model", the settings' "models" and "epochs" key, and the command
(``--models capsule-su --iterations 1`` becomes ``--models capsule-su-r1 --iterations 1``, what the code now
runs for it); "renamed" keeps the old name and command. Every number stays as it was; each file is re-sealed
with ``write_stored``, read back and compared before the old file is removed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsedu.runtime.stored import checksum, read_stored, write_stored  # noqa: E402

OLD, NEW = "capsule-su", "capsule-su-r1"


def numbers(value):
    """Every number in ``value``, in order (what must not change)."""
    if isinstance(value, dict):
        return [n for k in sorted(value) for n in numbers(value[k])]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def rename(path: Path) -> Path:
    """Write the renamed copy beside ``path``, check it, remove ``path``; returns the new file."""
    old = json.loads(path.read_text())
    assert old["checksum"] == checksum(old), f"{path} fails its checksum: not renamed"
    assert old["run"]["model"] == OLD and old["settings"]["models"] == [OLD] and old["settings"]["iterations"] == 1
    new = {**old, "command": old["command"].replace(f"--models {OLD} ", f"--models {NEW} "),
           "renamed": {"model": OLD, "command": old["command"]},
           "settings": {**old["settings"], "models": [NEW], "epochs": {NEW: old["settings"]["epochs"][OLD]}},
           "run": {**old["run"], "model": NEW}}
    target = path.with_name(path.name.replace(f"{OLD}-seed", f"{NEW}-seed"))
    sealed = write_stored(new, target)
    back = read_stored(target, require_checksum=True)
    assert back == sealed and back["run"]["model"] == NEW
    skip = ("checksum", "renamed")
    assert numbers({k: v for k, v in back.items() if k not in skip}) == numbers(
        {k: v for k, v in old.items() if k not in skip})
    path.unlink()
    return target


if __name__ == "__main__":
    files = sorted(ROOT.glob(f"results/two_digits_r1/{OLD}-seed*.json"))
    done = [rename(path) for path in files]
    print(f"{len(done)} of {len(files)} control run files renamed:", *(p.name for p in done))
