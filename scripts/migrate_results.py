"""Split the stored runs of one JSON file per experiment into one file per run (run once, kept for the record).

    python scripts/migrate_results.py    # results/*.json and results/two_digits_variants/*.json

``results/ablation.json`` becomes the folder ``results/ablation/``, one sealed file per (name, seed):
the old header, the run's record under ``"run"``, its own ``"seconds"``, and ``"migrated_from"`` (the
old file's name, checksum, total seconds, written, started, resumed and shards: nothing of it is
dropped but the summary, which the readers recompute). Weights files move into the folder. Each old
file is checked first (checksum, schema); it is removed only after its folder reads back to the
same runs, in the same order, record for record. It ran while two-digits still stored "config" and
"table"; ``scripts/rename_two_digit_keys.py`` renamed them afterwards.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsedu.experiments.shared.runs import RunFolder  # noqa: E402
from capsedu.runtime.stored import NAME_KEYS, read_runs, read_stored, write_stored  # noqa: E402

EXTRAS = ("seconds", "written", "started", "resumed", "shards")  # the old file's, kept under "migrated_from"
SUMMARIES = ("summary", "table")


def migrate(path: Path) -> str:
    old = read_stored(path, require_checksum=True)
    folder = path.with_suffix("")
    folder.mkdir()
    header = {k: v for k, v in old.items() if k not in ("runs", "format", "checksum", *EXTRAS, *SUMMARIES)}
    header["migrated_from"] = {"file": path.name, "checksum": old["checksum"],
                               **{k: old[k] for k in EXTRAS if k in old}}
    for record in old["runs"]:
        name = next((record[k] for k in NAME_KEYS if k in record), None)
        seconds = record.get("seconds", record.get("train_seconds", 0.0))
        write_stored({**header, "run": record, "seconds": seconds},
                     folder / f"{RunFolder.stem(record['seed'], name)}.json")
        if "weights" in record:
            (path.parent / record["weights"]).rename(folder / record["weights"])
    back = read_runs(folder)
    assert back["runs"] == old["runs"], f"{folder}: the runs read back differ"
    assert {k: back[k] for k in header} == header
    path.unlink()
    return f"{len(old['runs'])} runs -> {folder.relative_to(ROOT)}/"


if __name__ == "__main__":
    for file in sorted([*ROOT.glob("results/*.json"), *ROOT.glob("results/two_digits_variants/*.json")]):
        print(f"{file.relative_to(ROOT)}: {migrate(file)}")
