"""Chapter 11's reader: the tutorial code against the fixed code, from the stored runs or the live preview.

``tutorial_report(preview, data)`` reads ``results/tutorial_vs_fixed`` once, through
``capsedu.experiments.shared.runs.stored_or_preview``: a missing, damaged or partial folder is one
printed line, and the preview stands in, labelled. Either way the ``TutorialRuns`` it returns holds
what the page prints (budget box, figure, verdict rows, glued values) and the numbers its prose and
hidden checks use, so that no chapter cell reads a stored key. ``pitfall_table`` is the page's table
of the nine pitfalls, from the consequences measured on the page.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import matplotlib.pyplot as plt

from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.figures.tables import render_table
from capsedu.reports.stats import detectable_difference
from capsedu.reports.verdicts import (CANNOT_TELL, FAILS, HOLDS, adjust, compare, detectable_text, holm_text,
                                      interval_text, judge, table_note, verdict_text)

__all__ = ["TutorialRuns", "what_this_page_reads", "preview_summary", "tutorial_report", "pitfall_table"]

MODELS = ("tutorial", "fixed")
MAKE = "Make the stored run with:\n  python -m capsedu tutorial-vs-fixed --preset long --out results/tutorial_vs_fixed"
RISING = 0.002   # a last-epoch gain above this: not converged


def what_this_page_reads(d: Dict) -> None:
    """Raises (KeyError, IndexError, TypeError, ValueError) when the runs lack a field read below."""
    s = d["settings"]
    [s[k] for k in ("models", "seeds", "epochs", "batch_size", "lr", "n_train", "n_test", "source")]
    [d[k] for k in ("command", "date", "hardware", "torch", "seconds")]
    for r in d["runs"]:
        [r[k] for k in ("model", "seed", "params", "test", "seconds", "steps")] + [r["misses"]["test"]]
        [(e["epoch"], e["test"]) for e in r["epochs"]]
        if r["model"] == "tutorial":
            [r[k] for k in ("test_changed_by_batching", "non_finite_steps")] + [r["epochs"][-1]["test_as_reported"]]
    if {r["model"] for r in d["runs"]} != set(MODELS):
        raise ValueError("the stored run does not hold both models yet")


def _differs(c: Dict, p=None) -> str:
    """Holds when the interval lies wholly on one side of zero (either side)."""
    return CANNOT_TELL if judge(c, p=p) == CANNOT_TELL else HOLDS


@dataclass
class TutorialRuns:
    """Both models' runs (stored or the live preview), paired on the seeds both hold."""
    data: Dict
    stored: bool
    n_train: int
    n_test: int

    def __post_init__(self):
        self.settings = self.data["settings"]
        self.epochs = self.settings["epochs"]
        self.runs = {(r["model"], r["seed"]): r for r in self.data["runs"]}
        self.seeds = sorted({s for m, s in self.runs if ("tutorial", s) in self.runs and ("fixed", s) in self.runs})
        self.acc = {m: {s: self.runs[m, s]["test"] for s in self.seeds} for m in MODELS}
        self.mean_acc = {m: sum(v.values()) / len(v) for m, v in self.acc.items()}
        self.detect = detectable_difference(self.n_test, min(0.99, max(0.01, sum(self.mean_acc.values()) / 2)))
        self.rise = {m: self._mean(lambda r: r["epochs"][-1]["test"] - r["epochs"][-2]["test"], m)
                     if self.epochs > 1 else None for m in MODELS}
        self.per_step = {m: self._mean(lambda r: r["seconds"] / r["steps"], m) for m in MODELS}
        self.step_ratio = self.per_step["tutorial"] / self.per_step["fixed"]
        misses = {m: {s: self.runs[m, s]["misses"]["test"] for s in self.seeds} for m in MODELS}
        self.gap = compare(self.acc["fixed"], self.acc["tutorial"], self.n_test, misses["fixed"], misses["tutorial"])
        tut = [self.runs["tutorial", s] for s in self.seeds]
        reported = {s: r["epochs"][-1]["test_as_reported"] for s, r in zip(self.seeds, tut)}
        self.report_gap = compare(reported, self.acc["tutorial"], self.n_test)
        # the gap is the primary claim; the printed accuracy's, a second one, is Holm-adjusted (a family of one)
        self.rows = adjust([{"comparison": self.gap, "verdict": judge(self.gap), "primary": True},
                            {"comparison": self.report_gap, "verdict": CANNOT_TELL}])
        self.gap_verdict = self.rows[0]["verdict"]
        self.report_verdict = self.rows[1]["verdict"] = _differs(self.report_gap, self.rows[1]["p_holm"])
        if self.gap["detectable"] is not None:          # one seed's paired test on the shared test digits
            self.detect = self.gap["detectable"]
        self.gap_mean, self.report_mean = self.gap["mean"], self.report_gap["mean"]
        self.changed = [r["test_changed_by_batching"] for r in tut]
        # "a prediction does not depend on its batch": fails if it moved in every seed
        self.batch_verdict = (FAILS if min(self.changed) > 0 else HOLDS if max(self.changed) == 0
                              else CANNOT_TELL)
        self.nan_steps = sum(len(r["non_finite_steps"]) for r in tut)
        self.tut_steps = sum(r["steps"] for r in tut)
        self.report_all = [e["test_as_reported"] - e["test"] for r in tut for e in r["epochs"]]  # every (seed, epoch)

    def _mean(self, value, model: str) -> float:
        return sum(value(self.runs[model, s]) for s in self.seeds) / len(self.seeds)

    def provenance(self) -> str:
        d = self.data
        return (f"stored run: {d['command']}\n  {d['date']}, {d['hardware']}, torch {d['torch']}; "
                f"{d['seconds'] / 60:.0f} min of training")

    def budget_html(self) -> str:
        """The budget box: this run's data, epochs and test size against the tutorial code's own."""
        s, mean = self.settings, self.mean_acc
        converged = ", ".join(f"{m}: not judged (one epoch)" if r is None else
                              f"{m}: {'no' if r > RISING else 'flat'} (last epoch {r:+.3f})" for m, r in self.rise.items())
        rows = [
            ["training digits", f"{self.n_train:,} ({s['source']})", "all 60,000 MNIST training digits"],
            ["epochs, batch", f"{s['epochs']}, {s['batch_size']}", "30, 100"],
            ["test digits", f"{self.n_test:,}: differences below {self.detect:.3f} go undetected", "10,000"],
            ["accuracy reached", ", ".join(f"{m} {mean[m]:.3f}" for m in mean),
             "its printed log: test batches at 0.96 and 0.98 after epochs 1 and 2"],
            ["converged?", converged, "-"],
            ["seconds per step (this run)", ", ".join(f"{m} {v:.2f}" for m, v in self.per_step.items()), "-"],
        ]
        return ("<p><b>Budget box</b> (the tutorial column is the tutorial code's own settings and log)</p>"
                + render_table(["", "this run", "the tutorial code"], rows, html=True))

    def curves_figure(self) -> plt.Figure:
        """Test accuracy per epoch and seed; for the tutorial also the accuracy its own code reports."""
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        for m, colour in (("tutorial", "tab:red"), ("fixed", "tab:blue")):
            for k, s in enumerate(self.seeds):
                ep = self.runs[m, s]["epochs"]
                ax.plot([e["epoch"] for e in ep], [e["test"] for e in ep], "o-", color=colour, alpha=0.7,
                        label=f"{m} (longest capsule)" if k == 0 else None)
                if m == "tutorial":
                    ax.plot([e["epoch"] for e in ep], [e["test_as_reported"] for e in ep], "x--", color=colour,
                            alpha=0.5, label="tutorial, as its code reports it" if k == 0 else None)
        ax.set(xlabel="epoch", ylabel="test accuracy", title="stored run" if self.stored else "live preview")
        ax.set_xticks(range(1, self.epochs + 1))
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def verdict_html(self) -> str:
        """The three claims, seed by seed: the gap, the printed accuracy, and the batch dependence."""
        changed = self.changed
        gap, report = self.rows
        rows = [
            ["after the same budget, the fixed code is more accurate (fixed − tutorial)", "ours",
             interval_text(self.gap), holm_text(gap), detectable_text(self.gap), verdict_text(gap)],
            ["the tutorial's printed accuracy (the decoder mask's class) differs from its network's (longest "
             "capsule); reported − longest", "ours", interval_text(self.report_gap), holm_text(report),
             detectable_text(self.report_gap), self.report_verdict],
            ["a test digit's prediction does not depend on the other digits of its batch",
             "the paper (routing per example)",
             f"changed for {', '.join(map(str, changed))} of {self.n_test:,} digits (seed by seed)", "-", "-",
             self.batch_verdict],
        ]
        return render_table(["claim", "whose", "ours: mean [95% interval], p; McNemar", "Holm p",
                             "detectable (paired)", "verdict"], rows, html=True) + table_note(
            self.rows, "the fixed code against the tutorial's")

    def glued(self) -> Dict[str, object]:
        """The values the prose pastes in, by glue name, in the page's order."""
        mean = self.mean_acc
        ratios = [self.runs["tutorial", s]["seconds"] / self.runs["tutorial", s]["steps"]
                  / (self.runs["fixed", s]["seconds"] / self.runs["fixed", s]["steps"]) for s in self.seeds]
        nan = (f"None of its {self.tut_steps:,} training steps" if self.nan_steps == 0 else
               f"{self.nan_steps:,} of its {self.tut_steps:,} training steps")
        return {"ch11_step_ratios": f"{min(ratios):.2f} to {max(ratios):.2f}" if len(ratios) > 1 else "one seed",
                "ch11_nan_text": nan + f", over {len(self.seeds)} seed{'s' * (len(self.seeds) != 1)}, had a "
                                       "non-finite loss",
                "ch11_gap_verdict": self.gap_verdict, "ch11_gap_text": interval_text(self.gap),
                "ch11_tut_acc": mean["tutorial"], "ch11_fixed_acc": mean["fixed"],
                "ch11_report_verdict": self.report_verdict, "ch11_report_pos": sum(d > 0 for d in self.report_all),
                "ch11_report_n": len(self.report_all), "ch11_report_min": min(self.report_all),
                "ch11_report_max": max(self.report_all), "ch11_tvf_seeds": len(self.seeds),
                "ch11_tvf_epochs": self.epochs, "ch11_tvf_ntrain": self.n_train, "ch11_tvf_detect": self.detect,
                "ch11_changed_min": min(self.changed), "ch11_changed_max": max(self.changed),
                "ch11_nan_steps": self.nan_steps, "ch11_tut_steps": self.tut_steps, "ch11_step_ratio": self.step_ratio,
                "ch11_tvf_source": "the stored run" if self.stored else "the live preview (no stored run at hand)"}


def _runs(data: Dict, stored: bool, sample) -> TutorialRuns:
    s = data["settings"]
    return TutorialRuns(data, stored, s["n_train"] or len(sample.x_train), s["n_test"] or len(sample.x_test))


def preview_summary(preview: Dict, sample) -> Tuple[str, Dict[str, object]]:
    """The live preview's lines (what it trained on; model, test accuracy, seconds per run) and its glued
    values: the optimiser steps of its first run and the model ahead after them."""
    runs, s = preview["runs"], preview["settings"]
    lines = "\n".join([f"live preview: {s['n_train'] or len(sample.x_train):,} training digits, {s['epochs']} epoch(s), "
                        f"batch {s['batch_size']}, seed {s['seeds'][0]}, tested on {s['n_test'] or len(sample.x_test):,} digits"]
                       + [f"  {r['model']:8s} test accuracy {r['test']:.3f}   ({r['seconds']:.0f} s)" for r in runs])
    acc = {r["model"]: r["test"] for r in runs}
    return lines, {"ch11_prev_steps": runs[0]["steps"], "ch11_prev_ahead": max(acc, key=acc.get)}


def tutorial_report(preview: Dict, sample) -> Tuple[TutorialRuns, str]:
    """(the stored runs, their provenance line), or (the preview, the fallback note and how to make the run)."""
    stored, note = stored_or_preview("tutorial_vs_fixed", check=what_this_page_reads)
    if stored is None:
        return _runs(preview, False, sample), f"{note}\n{MAKE}"
    runs = _runs(stored, True, sample)
    return runs, runs.provenance()


# pitfall -> (the tutorial code's line, capsedu's fix); the consequence is measured on the page
PITFALLS: List[Tuple[str, str, str]] = [
    ("1", "F.softmax(b_ij), no dim: over the 1,152 inputs", "softmax(b, dim=2): over the 10 parents"),
    ("2", "b_ij + a_ij.mean(dim=0): one set of logits per batch", "logits per example"),
    ("3", "F.relu(0.9 - v_c), no square", "relu(0.9 - |v|)**2"),
    ("4", "0.0005 * MSELoss(recon, normalised image)", "0.0005 * sum of squares, pixels in [0, 1]"),
    ("5", "mask = classes.max(dim=1): the prediction", "mask = the true label in training"),
    ("6", "squared_norm * s / ((1 + squared_norm) * sqrt(squared_norm))", "s n / (k + n^2)"),
    ("7", "W = torch.randn(...)", "W ~ N(0, 0.01^2)"),
    ("8", "squash over an axis of size 1", "squash over the 16 numbers"),
    ("9", "torch.stack(u, dim=1).view(B, 1152, -1)", "8 units at one position"),
    ("-", "transforms: ToTensor, Normalize only", "random shift by up to 2 px"),
    ("-", "Adam(), constant learning rate", "x 0.96 every 2,000 steps"),
]


def pitfall_table(m: Dict[str, object]) -> str:
    """The pitfalls table (HTML) from the page's measurements ``m`` (the keys read below)."""
    consequences = [
        f"each input's coefficients sum to {m['coef_sum']:.4f} (10/1152), not 1",
        f"a length changes by up to {m['change']:.3f} with the batch; {m['flips']} of 32 predictions change",
        f"slope at |v| = 0.85: {m['slope_tutorial']:+.2f} (paper {m['slope_paper']:+.2f})",
        f"{m['weaker']:.0f}x weaker; a perfect decoder still pays {m['floor']:.6f}",
        f"a {m['label']} taken for a {m['guess']} trains capsule {m['guess']} to draw it; batch softmax: "
        f"{m['picked_wrong']} of 100 untrained digits masked by another class",
        f"one all-zero example: NaN in {m['nan_outputs']} of 4 outputs (pitfall 2); "
        f"one zero among 160 numbers: {m['nan_elementwise']} NaN (pitfall 8)",
        f"initial squash slope with randn on normalised images at most {m['randn_max']:.1e}; "
        f"with std 0.01 on pixels at least {m['small_min']:.1e}",
        f"a capsule length up to {m['longest']:.2f}, not below 1",
        f"capsule 1 holds {m['positions']} positions of one channel",
    ] + ["not separated: part of the trained comparison below"] * 2
    rows = [[*p, c] for p, c in zip(PITFALLS, consequences)]
    return render_table(["pitfall", "tutorial code", "fix (capsedu)", "consequence, measured above"], rows, html=True)
