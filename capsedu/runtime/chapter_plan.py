"""The chapters' training settings that live in their notebooks, and their stored CPU times.

Chapters 7, 9 and 10 train an experiment's preset (``PRESETS[mode]`` of its module); chapters 5,
8 and 11 set their training in the notebook, copied here as data so that the appendices can
tabulate every mode. ``stored_cpu_times`` reads the runs of ``benchmarks/chapters.py``.
"""
from __future__ import annotations

import json
from typing import Dict, List

from capsedu import MODES
from capsedu.runtime.results import benchmarks_dir

# chapter -> mode -> (networks, digits per epoch, epochs), as the notebook's by_mode sets them:
# chapter 5 trains one CapsNet, chapter 8 its detach pair, chapter 11 the tutorial and fixed code
NOTEBOOK_TRAINING = {
    "05_training": {"smoke": (1, 64, 2), "quick": (1, 3000, 2), "gpu": (1, 60000, 5),
                    "full": (1, 60000, 30)},
    "08_fast": {"smoke": (2, 64, 1), "quick": (2, 1024, 1), "gpu": (2, 60000, 1),
                "full": (2, 60000, 3)},
    "11_tutorial_code": {"smoke": (2, 48, 1), "quick": (2, 500, 1), "gpu": (2, 9000, 2),
                         "full": (2, 9000, 2)},
}


def stored_cpu_times(mode: str = "quick") -> List[Dict]:
    """One record per stored ``chapters-cpu-*.json`` run of ``mode``, oldest first: ``file``,
    ``hardware``, ``date``, ``load`` (the 1-minute load's (min, max) over the run, or None),
    ``complete``, ``note`` and ``seconds`` (notebook -> seconds, None where it failed)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    found = []
    for path in sorted(benchmarks_dir().glob("chapters-cpu-*.json")):
        run = json.loads(path.read_text())
        if run.get("mode") != mode:
            continue
        loads = [x for c in run["chapters"] for x in c.get("load_average_1min_before_after", [])]
        found.append({"file": path.name, "hardware": run["hardware"], "date": run["date"][:10],
                      "load": (min(loads), max(loads)) if loads else None,
                      "complete": run.get("complete", True), "note": run.get("note", ""),
                      "seconds": {c["notebook"]: c["seconds"] if c["ok"] else None
                                  for c in run["chapters"]}})
    return found
