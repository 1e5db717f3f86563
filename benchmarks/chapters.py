"""Wall time of every chapter, executed top to bottom in one mode, and the lines each
prints about accuracy and data. Prints one JSON object (the table in book/appendix_build.ipynb reads the
quick-mode runs stored under results/, and gpu_check.sh stores a gpu-mode run).

    python benchmarks/chapters.py --mode quick                      # the book build's budget
    python benchmarks/chapters.py --mode gpu book/05_training.ipynb # one chapter
    python benchmarks/chapters.py --mode quick --out benchmarks/results/chapters-cpu-DATE.json

With --out the file is rewritten after every chapter ("complete": false until the last), so a
run stopped half-way still leaves the chapters it measured. --timeout: seconds per cell;
--note: stored as is (e.g. what else the machine was running).
"""
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from common import options, record
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import capsedu
from capsedu.runtime.device import resolve_amp, resolve_device

ROOT = Path(__file__).resolve().parents[1]
# printed lines worth keeping: accuracies, which data was used, the estimates made before long cells
KEEP = re.compile(r"accura|test acc|capsedu data|^next:", re.I)


def printed_lines(nb) -> list:
    return [ln.strip() for cell in nb.cells for out in cell.get("outputs", [])
            if out.get("output_type") == "stream" and out.get("name") == "stdout"
            for ln in out["text"].splitlines() if KEEP.search(ln)]


def run_chapter(path: Path, timeout: int) -> dict:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})  # run in book/, as the build does
    load, t0, error = os.getloadavg()[0], time.perf_counter(), None
    try:
        client.execute()
    except CellExecutionError as err:
        error = str(err).strip().splitlines()[-1][:300]
    except Exception as err:  # a timeout or a dead kernel: record it, go on with the next chapter
        error = f"{type(err).__name__}: {str(err)[:300]}"
    return {"notebook": path.name, "seconds": round(time.perf_counter() - t0, 1), "ok": error is None,
            "error": error, "printed": printed_lines(nb),
            # the load other work put on the machine while this chapter ran
            "load_average_1min_before_after": [load, os.getloadavg()[0]]}


def main(argv=None):
    p = options(__doc__, timeout=900, note="")
    p.add_argument("notebooks", nargs="*", help="default: every chapter in book/")
    p.add_argument("--mode", required=True, choices=capsedu.MODES)
    p.add_argument("--out", type=Path, help="also write the JSON here, after every chapter")
    a = p.parse_args(argv)
    os.environ["CAPSEDU_MODE"] = a.mode  # the kernels inherit it
    paths = [Path(n).resolve() for n in a.notebooks] or sorted((ROOT / "book").glob("[0-9]*.ipynb"))
    device = resolve_device("auto")
    chapters, result = [], {}
    for path in paths:
        print(f"chapters.py: {path.name} in {a.mode} mode ...", file=sys.stderr, flush=True)
        chapters.append(run_chapter(path, a.timeout))
        print(f"chapters.py: {path.name} {chapters[-1]['seconds']:.0f} s, ok: {chapters[-1]['ok']}",
              file=sys.stderr, flush=True)
        result = record("chapters", argv, device, mode=a.mode, amp_auto=resolve_amp("auto", device), note=a.note,
                        complete=len(chapters) == len(paths),
                        total_seconds=round(sum(c["seconds"] for c in chapters), 1), chapters=chapters)
        if a.out:
            a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(c["ok"] for c in chapters) else 1


if __name__ == "__main__":
    sys.exit(main())
