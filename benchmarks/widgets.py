"""Milliseconds per update of the three live widgets, kernel side: from a control's new value
to the new PNG in the widget's Image (compute + redraw + encode), on the pretrained CapsNet.

Setting ``.value`` from Python runs the same observers a slider move in Jupyter or Colab runs;
not measured: the comm message to the browser and the browser's decoding of the PNG.

Prints one JSON object. Example:

    python benchmarks/widgets.py --repeats 20     # updates per control
"""
import statistics
import time

import matplotlib
from common import options, report

from capsedu.data.mnist import load_dataset
from capsedu.figures.frames import PAPER_DELTAS
from capsedu.figures.widgets import perturbation_explorer, routing_explorer, squash_explorer
from capsedu.training.pretrained import load_capsnet

LIMIT_MS = 100.0


def timed(events, repeats, setup=None):
    """Median, 90th percentile and most ms of ``repeats`` updates, cycling through ``events``
    (zero-argument callables; ``setup()`` before each, untimed)."""
    times = []
    for n in range(repeats):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        events[n % len(events)]()
        times.append(1e3 * (time.perf_counter() - t0))
    times.sort()
    return {"updates": repeats, "median_ms": round(statistics.median(times), 1),
            "p90_ms": round(times[int(0.9 * (repeats - 1))], 1), "max_ms": round(times[-1], 1)}


def main(argv=None):
    a = options(__doc__, repeats=20).parse_args(argv)
    model = load_capsnet()
    images = load_dataset("mnist", source="sample", verbose=False).x_test[:10]

    s = squash_explorer()
    r = routing_explorer(model, images)
    w = perturbation_explorer(model, images)
    ks = [0.5, 0.75, 1.0, 1.5]
    boxes = list(s.boxes.values())
    controls = {
        "squash: k slider": [lambda k=k: setattr(s.k, "value", k) for k in ks],
        "squash: example slider": [lambda x=x: setattr(s.example, "value", x) for x in (0.3, 0.8, 1.5, 2.5)],
        "squash: variant checkbox": [lambda b=b: setattr(b, "value", not b.value) for b in boxes],
        "routing: iteration slider": [lambda t=t: setattr(r.t, "value", t) for t in (1, 2, 3, 2)],
        "routing: Hinton/Su toggle": [lambda m=m: setattr(r.mode, "value", m) for m in ("su", "hinton")],
        "routing: iterations r slider": [lambda n=n: setattr(r.r, "value", n) for n in (4, 5, 6, 7, 8, 3)],
        "routing: CapsNet input picker": [lambda i=i: setattr(r.digit, "value", i) for i in range(1, 10)],
        "perturbation: dimension slider": [lambda d=d, v=v: setattr(w.sliders[d], "value", v)
                                           for d in (0, 5, 11) for v in PAPER_DELTAS],
        "perturbation: reset button": [w.reset.click],
        "perturbation: digit picker": [lambda i=i: setattr(w.digit, "value", i) for i in (1, 2, 3, 4, 5, 0)],
        "perturbation: range option": [lambda o=o: setattr(w.span, "value", o) for o in reversed(w.RANGES)],
    }
    results = {}
    for name, events in controls.items():
        setup = (lambda: setattr(w.sliders[3], "value", 0.1)) if name == "perturbation: reset button" else None
        results[name] = timed(events, max(a.repeats, len(events)), setup)
    worst = max(v["median_ms"] for v in results.values())
    report("widgets", argv, "cpu", matplotlib=matplotlib.__version__, limit_ms=LIMIT_MS,
           all_medians_under_limit=worst < LIMIT_MS, worst_median_ms=worst, updates=results)


if __name__ == "__main__":
    main()
