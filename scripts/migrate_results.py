"""Seal stored runs written before stored-run format 1: add "format" and "checksum", change nothing else.

    python scripts/migrate_results.py            # results/*.json and results/two_digits_variants/*.json
    python scripts/migrate_results.py FILE ...   # these files (e.g. a run that has just finished)
    python scripts/migrate_results.py --check    # exit 1 unless every file is sealed and intact

A file is skipped (and said so) when it is being written (a ``.lock`` or ``.tmp`` beside it, or one of
``BUSY``), when it is already sealed, or when it fails the schema or its checksum (a damaged file is
not sealed: that would make it look measured). After writing, the new file is read back and
compared with the old one: equal except for the two added keys, or the old file is put back.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsedu.runtime.files import write_atomic
from capsedu.runtime.stored import StoredRunError, check_schema, parse_stored, seal

BUSY: set = set()  # names a long run is writing right now (skipped; seal them later by name)


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def migrate(path: Path, by_name: bool = False) -> str:
    if not by_name and path.name in BUSY:
        return "skipped: being written by a long run (seal it by name once it is done)"
    for sibling in (path.with_name(path.name + ".lock"), path.with_name(path.name + ".tmp")):
        if sibling.exists():
            return f"skipped: {sibling.name} beside it (a run is writing it)"
    raw = path.read_bytes()
    try:
        old = json.loads(raw)
    except ValueError as err:
        return f"skipped: not readable JSON ({err})"
    if isinstance(old, dict) and ("format" in old or "checksum" in old):
        try:
            parse_stored(raw, path, require_checksum=True)
            return "already sealed"
        except StoredRunError as err:
            return f"skipped: {err.what}"
    problem = check_schema(old)
    if problem is not None:
        return f"skipped: {problem}"
    sealed = seal(old)
    assert _same({k: v for k, v in sealed.items() if k not in ("format", "checksum")}, old)
    write_atomic(str(path), lambda f: f.write((json.dumps(sealed, indent=2) + "\n").encode()))
    back = json.loads(path.read_bytes())
    if not _same({k: v for k, v in back.items() if k not in ("format", "checksum")}, old):
        write_atomic(str(path), lambda f: f.write(raw))
        return "FAILED: content changed; the old file is back"
    parse_stored(path.read_bytes(), path, require_checksum=True)
    return "sealed (format and checksum added)"


def main(argv) -> int:
    check = "--check" in argv
    names = [a for a in argv if a != "--check"]
    paths = [Path(n) for n in names] or sorted([*ROOT.glob("results/*.json"),
                                                *ROOT.glob("results/two_digits_variants/*.json")])
    bad = 0
    for path in paths:
        if check:
            try:
                parse_stored(path.read_bytes(), path, require_checksum=True)
                status = "sealed and intact"
            except StoredRunError as err:
                status, bad = f"NOT OK: {err.what}", bad + 1
        else:
            status = migrate(path, by_name=bool(names))
            bad += status.startswith("FAILED")
        print(f"{path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path}: {status}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
