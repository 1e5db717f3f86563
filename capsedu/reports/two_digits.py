"""Chapter 7's reader: a two-digit result as the tables, lines, figures and verdicts the chapter shows.

A result is what ``capsedu.experiments.two_digits.run.two_digit_experiment`` returns (the live preview)
or what ``capsedu.experiments.shared.runs.stored_or_preview`` reads from a folder of runs: the same
keys, so one reader serves both and the chapter indexes none of them. ``two_digit_report`` takes the
stored run where it can be used, else the live preview, with the one line that says why; ``verdicts``
judges the chapter's ``CLAIMS`` seed by seed. Ink gaps and settings: ``reports.two_digits_causes``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.experiments.two_digits.run import curve, format_table
from capsedu.figures.tables import render_table
from capsedu.reports.verdicts import (by_seed, detectable_text, holm_text, interval_text, rows_for, table_note,
                                      verdict_text)

__all__ = ["PREVIEW", "SU_REPORTED", "COLOURS", "CLAIMS", "TwoDigitReport", "two_digit_report", "Verdicts", "verdicts"]

PREVIEW = "showing the live preview instead (not the stored run)"   # how every fallback note ends
CONTROL = "the stored r = 1 control"
SU_REPORTED = {  # Su's own numbers, vertical layout (his script); None: not reported
    "pooling": ("about 0.40", "about 0.10", "blog post"),
    "capsule-su": ("over 0.90", "over 0.90", "blog post (January routing)"),
    "capsule-su-march": ("about 0.95", None, "README, with the March routing"),
    "capsule-hinton": ("60-70% (from memory)", None, "issue reply"),
}
COLOURS = {"pooling": "tab:gray", "capsule-su": "tab:red", "capsule-su-march": "tab:purple", "capsule-hinton": "tab:blue",
           "capsule-su-r1": "tab:orange"}


@dataclass
class TwoDigitReport:
    """One two-digit result under its label; ``result`` is None where a stored run with no live stand-in
    cannot be used, and ``note`` says why (it is also set where the live preview stands in)."""
    result: Optional[Dict]
    label: str                       # "the stored run", "the live preview", "the stored r = 1 control"
    note: Optional[str] = None
    stored: bool = False

    def __post_init__(self):
        if self.result is not None:
            r = self.result
            self.runs, self.rows = r["runs"], {row["model"]: row for row in r["summary"]}
            self.models, self.layouts, self.n_pairs = list(self.rows), r["settings"]["layouts"], r["settings"]["n_pairs"]
            self.n_test = r["meta"]["n_test"]    # single test digits: the first n_test of the data's test set

    def describe(self) -> str:
        """Where the numbers come from: the live preview's budget, the stored run's provenance, or the note."""
        r = self.result
        if r is None:
            return self.note
        c, started = r["settings"], r.get("started") or r["date"]
        if not self.stored:
            m = r["meta"]
            return (f"live preview: trained on {m['n_train']:,} single digits ({m['data'][1]}), tested on {self.n_test:,} "
                    f"single digits and {self.n_pairs:,} pairs per layout; {len(c['seeds'])} seed(s); "
                    f"{r['seconds']:.0f} s on {r['device']}")
        if self.label == CONTROL:
            return (f"stored control: {r['command']}\n  started {started}, on {r['hardware']}; {len(self.runs)} of "
                    f"{len(c['seeds'])} seeds trained, iterations = {c['iterations']}")
        epochs = " or ".join(str(e) for e in sorted(set(c["epochs"].values())))
        return (f"stored run: {r['command']}\n  started {started}, last written {r.get('written', r['date'])}, "
                f"on {r['hardware']}, torch {r['torch']}\n  {len(self.runs)} of {len(c['models']) * len(c['seeds'])} "
                f"networks trained ({epochs} epochs each, batch {c['batch_size']}, {self.n_pairs:,} pairs per layout), "
                f"{r['seconds'] / 3600:.1f} h of wall time")

    def table(self) -> str:
        """HTML: one row per model, mean ± std over its seeds of every measure."""
        return format_table(self.result, html=True)

    def min_single(self) -> float:
        return min(row["single_acc"] for row in self.rows.values())

    def ties(self) -> str:
        """Images whose weaker true class ties with another class count as misses: how many there were."""
        ties = [(r["model"], r["seed"], k.removesuffix("_ties"), r[k]) for r in self.runs for k in r if k.endswith("_ties")]
        worst = max(ties, key=lambda t: t[3], default=(None, None, None, 0))
        if worst[3] == 0:
            return f"ties: none in the {len(ties)} (run, layout) pairs; counting ties as misses changes nothing"
        return (f"ties (counted as misses): at most {worst[3]:.2%} of the images ({worst[0]} seed {worst[1]}, "
                f"{worst[2]} layout); the mean over {len(ties)} (run, layout) pairs is "
                f"{sum(t[3] for t in ties) / len(ties):.2%}")

    def against_su(self) -> str:
        """HTML: Su's reported numbers beside ours, for the heads both have."""
        table = [[name, top2, conf or "not reported", where, *(f"{self.rows[name][f'{lay}_{m}']:.2f}"
                                                              for lay in ("vertical", "horizontal") for m in ("top2", "top2_conf"))]
                 for name, (top2, conf, where) in SU_REPORTED.items() if name in self.rows]
        return render_table(["model", "Su: top-2", "Su: top-2 > 0.5", "Su: where", "ours, vertical: top-2",
                             "ours, vertical: top-2 > 0.5", "ours, horizontal: top-2",
                             "ours, horizontal: top-2 > 0.5"], table, html=True)

    def seed_by_seed(self, heads: Sequence[str]) -> List[str]:
        """Each capsule head of ``heads`` minus pooling, seed by seed, per layout (not means alone); then each
        model's share of right top-2 answers whose second score is not above 0.5 (Su's two measures apart)."""
        lines = []
        for layout in self.layouts:
            base = by_seed(self.runs, "pooling", f"{layout}_top2")
            for name in (h for h in ("capsule-su", "capsule-su-march", "capsule-hinton") if h in heads):
                mine = by_seed(self.runs, name, f"{layout}_top2")
                diff = [mine[s] - base[s] for s in sorted(mine) if s in base]
                if diff:
                    lines.append(f"{layout:11} top-2, {name:16} - pooling: " + ", ".join(f"{d:+.2f}" for d in diff)
                                 + f"  ({sum(d > 0 for d in diff)}/{len(diff)} seeds > 0)")
        for name in dict.fromkeys(r["model"] for r in self.runs):
            hits = sum(by_seed(self.runs, name, "vertical_top2").values())
            gap = hits - sum(by_seed(self.runs, name, "vertical_top2_conf").values())
            lines.append(f"{name:16} vertical: share of top-2 hits whose second score is not above 0.5: "
                         f"{gap / max(hits, 1e-9):.2f}")
        return lines

    def networks(self) -> Dict[str, object]:
        """The live preview's networks trained with its first seed, by model (a stored run keeps none)."""
        return {name: nets[0] for name, nets in self.result.get("trained", {}).items() if nets}

    def bars(self, title: str):
        """Both measures per layout and model: the mean over seeds, a whisker of one std; Su's as dashes."""
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
        x, width, k0 = np.arange(len(self.layouts)), 0.8 / len(self.models), (len(self.models) - 1) / 2
        for ax, metric, name in zip(axes, ("top2", "top2_conf"), ("top-2 right", "top-2 right and second score > 0.5")):
            for k, (model, row) in enumerate(self.rows.items()):
                ax.bar(x + (k - k0) * width, [row[f"{lay}_{metric}"] for lay in self.layouts], width, capsize=3,
                       yerr=[row[f"{lay}_{metric}_std"] or 0.0 for lay in self.layouts], color=COLOURS[model], label=model)
            su = {"top2": (0.40, 0.90), "top2_conf": (0.10, 0.90)}[metric]  # Su's blog: pooling, capsule (a floor)
            ax.scatter([-k0 * width, (1 - k0) * width], su, marker="_", s=400, color="k", zorder=3, label="Su, blog (vertical)")
            ax.set_xticks(x, self.layouts)
            ax.set(xlabel="layout of the two test digits", title=f"{title}: {name}", ylim=(0, 1))
        axes[0].set_ylabel("fraction of two-digit test images")
        axes[1].legend(fontsize=8, loc="upper right")
        fig.tight_layout()
        return fig

    def curves(self):
        """The learning curves (single digits, each layout's top-2): mean over seeds, a band of one std;
        None where no run kept one."""
        models = list(dict.fromkeys(r["model"] for r in self.runs if "curve" in r))
        if not models:
            return None
        import matplotlib.pyplot as plt
        keys = [("test_acc", "single digits")] + [(f"{lay}_top2", f"{lay} pairs, top-2") for lay in self.layouts]
        fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.4), sharey=True)
        for ax, (key, title) in zip(axes, keys):
            for model in models:
                x, mean, std = (np.array(v) for v in curve(self.result, model, key))
                ax.plot(x, mean, color=COLOURS[model], label=model)
                ax.fill_between(x, mean - std, mean + std, color=COLOURS[model], alpha=0.2, lw=0)
            ax.set(xlabel="epoch", title=title, ylim=(0, 1))
        axes[0].set_ylabel(f"accuracy ({self.label})")
        axes[-1].legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        return fig


def two_digit_report(name: str, live: Optional[Dict] = None, control: bool = False) -> TwoDigitReport:
    """The stored run ``results/<name>`` (``control``: the r = 1 control); where it is missing, damaged or
    lacks what this reader quotes, ``live`` with the note why, or, without ``live``, no result and the note."""
    def check(d):  # what describe() quotes beyond the settings that the summary already needed
        return d["meta"]["n_test"], d["settings"]["epochs"].values(), d["command"], d["hardware"], d["torch"]
    data, note = stored_or_preview(name, check)
    label = CONTROL if control else "the stored run"
    if data is not None:
        return TwoDigitReport(data, label, stored=True)
    if live is not None:
        return TwoDigitReport(live, "the live preview", note)
    return TwoDigitReport(None, label, note.replace(PREVIEW, "the verdict below cannot use it"))


CLAIMS = [  # a minus b, claimed to be positive; "misses": the stored per-image outcomes McNemar pairs
    dict(key="su_vert", claim="Su's head names both digits more often than pooling (vertical, top-2)",
         whose="Su", a="capsule-su", b="pooling", field="vertical_top2", misses="vertical"),
    dict(key="march_vert", claim="... with his March routing", whose="Su (README)",
         a="capsule-su-march", b="pooling", field="vertical_top2", misses="vertical"),
    dict(key="hinton_vert", claim="... with the paper's routing", whose="Su (issue reply)",
         a="capsule-hinton", b="pooling", field="vertical_top2", misses="vertical"),
    dict(key="su_conf", claim="... and is confident about both (vertical, top-2 > 0.5)", whose="Su",
         a="capsule-su", b="pooling", field="vertical_top2_conf"),
    dict(key="su_hor", claim="Su's head beats pooling side by side too (horizontal, top-2)", whose="Su (prose)",
         a="capsule-su", b="pooling", field="horizontal_top2", misses="horizontal"),
    dict(key="march_hor", claim="... with his March routing", whose="Su (README)",
         a="capsule-su-march", b="pooling", field="horizontal_top2", misses="horizontal"),
    dict(key="su_over", claim="Su's head keeps an advantage on overlapping digits", whose="ours",
         a="capsule-su", b="pooling", field="overlapping_top2", misses="overlapping"),
    dict(key="single", claim="Su's head is better on single digits", whose="ours",
         a="capsule-su", b="pooling", field="single_acc", misses="single"),
    dict(key="r1_pool", claim="Summing alone (1 iteration, no routing) beats pooling (vertical, top-2)",
         whose="ours: the control", a="capsule-su-r1", b="pooling", field="vertical_top2"),
    dict(key="r1_vert", claim="Routing adds to summing: Su's January routing against 1 iteration (vertical)",
         whose="the paper, Su", a="capsule-su", b="capsule-su-r1", field="vertical_top2", misses="vertical"),
    dict(key="r1_hor", claim="... side by side (horizontal)", whose="the paper, Su",
         a="capsule-su", b="capsule-su-r1", field="horizontal_top2", misses="horizontal"),
    dict(key="march_r1_vert", claim="... his March routing against 1 iteration (vertical)", whose="the paper, Su",
         a="capsule-su-march", b="capsule-su-r1", field="vertical_top2", misses="vertical",
         claimed=(0.55, "all of Su's March advantage over pooling (0.95 against 0.40)")),
    dict(key="march_r1_hor", claim="... side by side (horizontal)", whose="the paper, Su",
         a="capsule-su-march", b="capsule-su-r1", field="horizontal_top2", misses="horizontal"),
    dict(key="hinton_r1_vert", claim="... the paper's routing against 1 iteration (vertical)",
         whose="the paper, Su", a="capsule-hinton", b="capsule-su-r1", field="vertical_top2", misses="vertical",
         claimed=(0.25, "all of the advantage Su recalls for it (60-70% against 0.40)")),
    dict(key="hinton_r1_hor", claim="... side by side (horizontal)", whose="the paper, Su",
         a="capsule-hinton", b="capsule-su-r1", field="horizontal_top2", misses="horizontal"),
]


PRIMARY = ("su_vert", "r1_pool", "r1_vert")   # the chapter's headline claims; the other rows are Holm-adjusted
CLAIMED = {  # the source's effect, a minus b, that a "cannot tell" is set against; a key: that row's measured mean
    "su_vert": (0.50, "Su's"), "su_conf": (0.80, "Su's"), "march_vert": (0.55, "Su's"),
    "hinton_vert": (0.25, "Su's"), "r1_vert": "su_vert", "r1_hor": "su_hor"}


@dataclass
class Verdicts:
    """``CLAIMS`` judged: ``rows`` maps each claim's key to its ``capsedu.reports.verdicts.rows_for`` row."""
    rows: Dict[str, Dict]
    heading: str                     # which runs the verdicts come from
    n_pairs: int
    no_misses: List[str]             # models whose runs stored no per-image outcomes

    def verdict(self, key: str) -> str:
        return self.rows[key]["verdict"]

    def comparison(self, key: str) -> Optional[Dict]:
        """The claim's paired difference (mean, low, high, p, seeds, ...); None where a model is missing."""
        return self.rows[key]["comparison"]

    def table(self) -> str:
        """HTML: one row per claim, then the note on how the rows were judged."""
        table = [[row["claim"], row["whose"], f"{row['a']} − {row['b']}",
                  interval_text(c) if c else "not stored in this copy", holm_text(row), detectable_text(c),
                  verdict_text(row)] for row in self.rows.values() for c in [row["comparison"]]]
        return render_table(["claim", "whose", "difference", "ours: mean [95% interval], p", "Holm p",
                             "detectable (paired)", "verdict"], table, html=True) + table_note(
            list(self.rows.values()), "Su's head against pooling, vertical; summing alone against pooling; "
            "routing against summing, vertical")

    def mcnemar(self) -> str:
        """In how many rows McNemar's test paired the images, and whose runs kept no per-image outcomes."""
        done = sum(bool(row["comparison"] and row["comparison"]["mcnemar"]) for row in self.rows.values())
        return (f"McNemar's test in {done} of {len(self.rows)} rows"
                + (f"; no per-image outcomes stored for {', '.join(self.no_misses)} (a run made before misses were "
                   "stored), so their rows are paired by seed only" if self.no_misses else ""))

    def glued(self) -> Dict[str, object]:
        """What the prose quotes, by glue name: each claim's verdict, mean and interval."""
        values = {"ch7_n_pairs": self.n_pairs}
        for key, row in self.rows.items():
            c = row["comparison"]
            values[f"ch7_{key}_verdict"] = row["verdict"]
            values[f"ch7_{key}"] = c["mean"] if c else float("nan")
            values[f"ch7_{key}_ci"] = f"{c['low']:+.2f} to {c['high']:+.2f}" if c and c["low"] is not None else "none"
        return values


def verdicts(long: TwoDigitReport, control: TwoDigitReport) -> Verdicts:
    """``CLAIMS`` on ``long``'s runs; the control's ("capsule-su-r1") join only beside a stored run,
    since the live preview is not trained on the control's budget."""
    runs = list(long.runs)
    with_control = long.stored and control.stored
    if with_control:
        runs += control.runs
    claims = [{**c, "n": long.n_test if c["field"] == "single_acc" else long.n_pairs,
               "primary": c.get("primary", c["key"] in PRIMARY)} for c in CLAIMS]
    rows = {row["key"]: row for row in rows_for(claims, runs, long.n_pairs)}
    for key, claimed in CLAIMED.items():        # "routing makes the advantage": all of it, as measured
        if key in rows and isinstance(claimed, str):
            c = rows.get(claimed, {}).get("comparison")
            claimed = (c["mean"], "all of the capsule advantage (su − pooling)") if c else None
        if key in rows and claimed is not None:
            rows[key].setdefault("claimed", claimed)
    heading = f"verdicts from {long.label}" + (f" and {CONTROL}" if with_control else "")
    return Verdicts(rows, heading, long.n_pairs, sorted({r["model"] for r in runs if "misses" not in r}))
