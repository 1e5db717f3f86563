"""Rename two-digits' stored "config" to "settings" and "table" to "summary", as every experiment stores them
(run once on 2026-12-03, kept for the record).

    python scripts/rename_two_digit_keys.py    # results/two_digits_*/*.json and results/two_digits_variants/*/*.json

Every other value stays as it was, "migrated_from" (the original file's checksum) included; each file is
re-sealed (its checksum changes with its content) and read back before the next one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsedu.runtime.stored import checksum, read_stored, write_stored  # noqa: E402

RENAMED = {"config": "settings", "table": "summary"}


def rename(path: Path) -> bool:
    """True if ``path`` had an old key (it is re-sealed in place), False if it already had the new ones."""
    old = json.loads(path.read_text())
    if not any(k in old for k in RENAMED):
        return False
    assert old["checksum"] == checksum(old), f"{path} fails its checksum: not renamed"
    new = {RENAMED.get(k, k): v for k, v in old.items()}
    sealed = write_stored(new, path)
    assert read_stored(path, require_checksum=True) == sealed
    assert {k: v for k, v in sealed.items() if k != "checksum"} == {k: v for k, v in new.items() if k != "checksum"}
    return True


if __name__ == "__main__":
    files = sorted([*ROOT.glob("results/two_digits_*/*.json"), *ROOT.glob("results/two_digits_variants/*/*.json")])
    done = [path for path in files if rename(path)]
    print(f"{len(done)} of {len(files)} two-digit run files renamed")
