"""What the benchmark scripts share: their options, their batch of digits and their one JSON object."""
import argparse
import json
import os
import shlex
import sys

from capsedu.data.mnist import load_dataset
from capsedu.runtime.device import cpuinfo
from capsedu.runtime.results import provenance

STARTED_LOAD = os.getloadavg()  # the machine's load when the script started


def options(doc: str, **defaults) -> argparse.ArgumentParser:
    """A script's parser, its docstring as the help: one ``--name`` per keyword, of its default's
    type (``False``: a flag); a script adds any other option itself."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        flag = "--" + name.replace("_", "-")
        if default is False:
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(default), default=default)
    return p


def digits(n: int, device="cpu"):
    """The embedded sample's first ``n`` training digits and their labels, on ``device``."""
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    return data.x_train[:n], data.y_train[:n]


def cpu_flags() -> dict:
    """The CPU's model name and its matrix and vector extensions (Linux's /proc/cpuinfo)."""
    wanted = ("amx", "avx512_bf16", "avx512_fp16", "avx512f", "avx512_vnni", "avx2", "fma")
    return {"model": cpuinfo("model name"),
            "flags": sorted(f for f in (cpuinfo("flags") or "").split() if f.startswith(wanted))}


def record(benchmark: str, argv, device, **fields) -> dict:
    """The benchmark's JSON object: its name, its command line (``argv``, or this process's),
    when and where it ran, the device, the load average before and after (other work on the
    machine), then ``fields``."""
    args = sys.argv[1:] if argv is None else argv
    return {"benchmark": benchmark, **provenance(shlex.join(["python", f"benchmarks/{benchmark}.py", *args]),
                                                 str(device)),
            "device": str(device), "load_average_before_after": [STARTED_LOAD, os.getloadavg()], **fields}


def report(benchmark: str, argv, device, **fields) -> dict:
    """Print ``record(...)`` as JSON, and return it."""
    result = record(benchmark, argv, device, **fields)
    print(json.dumps(result, indent=2))
    return result
