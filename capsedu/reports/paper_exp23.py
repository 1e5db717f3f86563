"""Chapter 9's readers of experiments 2 and 3 (ablation, MultiMNIST); see ``capsedu.reports.paper``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from capsedu.experiments import multimnist
from capsedu.figures.tables import mean_std, render_table
from capsedu.reports.paper import (LIVE, ROUTE, STORED, T1_DIFFS, _budget, _converged, _detect, _provenance,
                                   _read, _schedule, ran)
from capsedu.reports.verdicts import holm_text, interval_text, rows_for, table_note, verdict_text

__all__ = ["PAIRS", "ablation_table", "ablation_report", "Ablation", "multimnist_line", "multimnist_report",
           "MultiMNIST"]

PAIRS = [("r1", "r3", "routing (3 iterations instead of 1), no reconstruction"),
         ("r1+recon", "r3+recon", "routing, with reconstruction"),
         ("r3", "r3-detach", "stopping the inner iterations' gradients, no reconstruction"),
         ("r3+recon", "r3-detach+recon", "stopping the inner iterations' gradients, with reconstruction"),
         ("r1", "r1+recon", "the reconstruction loss, without routing"),
         ("r3", "r3+recon", "the reconstruction loss, with routing")]


def ablation_table(res: Dict) -> str:
    """One row per variant: its switches, seeds, shifted test error and affine accuracy beside the paper's (HTML)."""
    s = res["settings"]
    heads = ["variant", "iterations", "reconstruction", "detach_inner", "seeds", "test error % (shifted)",
             f"affine acc. (s = {s['affine_strength']:g}, {s['canvas']}×{s['canvas']})", "the paper's error %"]
    rows = [[r["variant"], r["iterations"], r["reconstruction"], r["detach_inner"], r["seeds"],
             mean_std(r["clean_error"], r["clean_error_std"], 2), mean_std(r["affine_acc"], r["affine_acc_std"]),
             "" if r["paper_error"] is None else f"{r['paper_error'][0]:.2f} ± {r['paper_error'][1]:.3f}"]
            for r in res["summary"]["table"]]
    return render_table(heads, rows, html=True)


def _ablation_rows(runs: List[Dict], n: int, strength: float) -> Dict[tuple, Dict]:
    "One verdict row per pair and test set, keyed (a, b, field): the changed variant b minus the one it changes, a."
    fields = (("acc", "clean", "shifted test"), ("affine_acc", "affine", f"affine s = {strength:g}"))
    claims = [dict(key=(a, b, field), a=b, b=a, field=field, misses=miss, what=what, measure=name,
                   primary=(a, b, field) == ROUTE) for a, b, what in PAIRS for field, miss, name in fields]
    return {row["key"]: row for row in rows_for(claims, runs, n, key="variant")}


@dataclass
class Ablation:
    """Experiment 2 as the page prints it: each of routing, its inner gradients and the reconstruction loss,
    changed alone and paired seed by seed."""
    result: Dict
    label: str
    notes: List[str]          # printed before the budget box: the provenance, or why the live preview stands in
    n: int                    # the test digits
    detect: float
    canvas: str               # e.g. "28×28, up to 2 px"
    canvas_words: str
    papers: bool              # the paper's canvas and shifts (28×28, 2 px)
    budget: str
    comparisons: Dict[tuple, Dict]   # (a, b, field) -> verdict row; ROUTE, RECON, ROUTE_AFF are the claims'
    sign_note: str            # the live preview's routing difference has the other sign (else "")

    stored = property(lambda self: self.label == STORED)
    table = property(lambda self: ablation_table(self.result))
    pairs_title = property(lambda self: f"from {self.label} ({self.canvas}); McNemar refers to the test set of its row")

    @property
    def pairs_table(self) -> str:
        "Every pair on both test sets (HTML)."
        rows = list(self.comparisons.values())
        return render_table(["change", "difference", "test set", "mean [95% interval], p", "Holm p",
                             "verdict (the change helped)"],
                            [[r["what"], f"{r['a']} − {r['b']}", r["measure"],
                              interval_text(r["comparison"]) if r["comparison"] else "pair not stored", holm_text(r),
                              verdict_text(r)] for r in rows], html=True) + table_note(rows, "routing with "
                                                                                        "reconstruction, shifted test")

    @property
    def routing(self) -> str:
        "Routing with reconstruction in words (Markdown), and whether the live preview points the other way."
        row = self.comparisons[ROUTE]
        c = row["comparison"]
        said = f"{interval_text(c)}; verdict on 'routing lowers the error': *{row['verdict']}*." if c else "not stored."
        return "\n\n".join([f"**From {self.label}** ({self.canvas_words}), routing with reconstruction, "
                            f"r3+recon − r1+recon: " + said] + ([self.sign_note] if self.sign_note else []))


def ablation_report(live: Dict, data) -> Ablation:
    """Experiment 2 from ``results/ablation``, or from ``live``; ``data``'s sizes stand where the settings say None."""
    def rows(res):
        runs = [{**r, "acc": 1 - r["clean_error"] / 100} for r in res["runs"]]   # accuracy, for the comparisons
        return runs, res["settings"]["n_test"] or len(data.y_test)

    def build(res, note):
        s, label = res["settings"], STORED if note is None else LIVE
        notes = [_provenance(res, len(s["variants"]) * len(s["seeds"]))] if note is None else [note]
        runs, n = rows(res)
        comparisons = _ablation_rows(runs, n, s["affine_strength"])
        paired = (comparisons[ROUTE]["comparison"] or {}).get("detectable")   # one seed's paired test
        detect = paired or _detect(n, np.mean([r["acc"] for r in runs]))
        how = "one seed's paired test, r3+recon − r1+recon" if paired else "two independent test sets"
        best = next((r for r in res["summary"]["table"] if r["variant"] == "r3+recon"), None)
        canvas = f"{s['canvas']}×{s['canvas']}, up to {s['max_shift']} px"
        papers = s["canvas"] == 28 and s["max_shift"] == 2
        budget = _budget(f"experiment 2, {label}", [
            ["epochs", f"{s['epochs']}; {_schedule(res['runs'])}", "not stated"],
            ["training digits", f"{(s['n_train'] or len(data.y_train)):,}", "60,000 (all of MNIST)"],
            ["canvas and shifts", canvas + ("" if papers else ": not the paper's"), "28×28, up to 2 px"],
            ["seeds", str(len(s["seeds"])), "3 trials"],
            ["accuracy reached (r3+recon)", f"test error {mean_std(best['clean_error'], best['clean_error_std'], 2)}%"
             if best else "r3+recon not stored", "test error 0.25 ± 0.005%"],
            ["converged", _converged([[e["train_acc"] for e in r["epochs"]] for r in res["runs"]], "training accuracy")[1],
             "not stated"],
            ["can detect", f"accuracy differences of {detect:.3f} ({100 * detect:.1f} points of %) or more on {n:,} test "
             f"digits ({how})",
             f"its rows differ by {min(map(abs, T1_DIFFS.values())):.2f} to {max(map(abs, T1_DIFFS.values())):.2f} "
             "points, on 10,000 digits"],
            ["affine set", f"strength {s['affine_strength']:g} on {s['canvas']}×{s['canvas']} (not chapter 10's 0.5 on 28×28)",
             "none"]])
        sign_note = ""
        if note is None:   # does the live preview point the same way as the stored run?
            ours, theirs = comparisons[ROUTE]["comparison"], _ablation_rows(*rows(live), s["affine_strength"])[ROUTE]["comparison"]
            if ours and theirs and 0 not in (np.sign(ours["mean"]), np.sign(theirs["mean"])) \
                    and np.sign(ours["mean"]) != np.sign(theirs["mean"]):
                sign_note = (f"The live preview's difference has the other sign ({theirs['mean']:+.3f} against the "
                             f"stored {ours['mean']:+.3f}): at the preview's budget a sign means nothing.")
        return Ablation(res, label, notes, n, detect, canvas,
                        f"{s['canvas']}×{s['canvas']} canvas with shifts of up to {s['max_shift']} pixels",
                        papers, budget, comparisons, sign_note)
    return _read("ablation", live, build)


# ---------------------------------------------------------------- experiment 3: MultiMNIST

@dataclass
class MultiMNIST:
    """Experiment 3 as the page prints it: a small-budget preview, and the network that redraws the pairs
    (the stored weights where they load, else the live preview's model)."""
    result: Dict
    label: str
    notes: List[str]
    model: object
    model_label: str          # whose network the figure shows: the stored weights may be missing where the run is not
    n_train: int              # the training digits the pairs are drawn from
    ok: Optional[bool]        # converged (None: cannot tell)
    converged: str
    budget: str

    stored = property(lambda self: self.label == STORED)
    error = property(lambda self: self.result["summary"]["error"])
    seeds = property(lambda self: self.result["summary"]["seeds"])
    seeds_text = property(lambda self: f"{self.seeds} seed" + ("s" if self.seeds != 1 else ""))
    n_test_pairs = property(lambda self: self.result["settings"]["n_test_pairs"])
    pairs = property(lambda self: self.result["settings"]["epochs"] * self.result["settings"]["pairs_per_epoch"])
    share = property(lambda self: self.pairs / 60e6)   # of the paper's 60M training pairs
    converged_words = property(lambda self: "has not converged" if self.ok is False else
                               "has about converged" if self.ok else "cannot be judged")

    def findings(self) -> str:
        "What experiment 3 shows, in Markdown."
        curve = np.mean([[e["top2"] for e in r["epochs"]] for r in self.result["runs"]], axis=0)   # mean over seeds
        return "\n".join([
            f"**From {self.label}, a small-budget preview**: {self.seeds_text}, {self.pairs:,} fresh pairs in all "
            f"from {self.n_train:,} training digits.",
            f"- Top-2 error on {self.n_test_pairs:,} test pairs: {self.error:.1f}%. The paper trained on "
            "60M pairs of all of MNIST; at budgets this different the two errors are not compared.",
            f"- Top-2 accuracy after each epoch: {', '.join(f'{a:.2f}' for a in curve)}; {self.converged}.",
            "- The figure above is the check the number cannot give: whether each capsule redraws *its* digit "
            "where the two overlap, or a blend of both."])


def multimnist_line(live: Dict) -> str:
    "The live preview's result in one line."
    return f"live preview: top-2 accuracy {live['summary']['top2']:.3f} (error {live['summary']['error']:.1f}%), {ran(live)}"


def multimnist_report(live: Dict, data) -> MultiMNIST:
    """Experiment 3 from ``results/multimnist`` (with its weights), or from ``live`` (run with ``return_model``)."""
    def build(res, note):
        model, model_label, notes = live["model"], LIVE, [note] if note else []
        if note is None:
            notes = [_provenance(res, len(res["settings"]["seeds"]))]
            try:
                model, model_label = multimnist.load_model(res), STORED
            except (OSError, ValueError, StopIteration, KeyError) as err:
                notes.append(f"the stored weights are not available here ({str(err)[:80]}); the figure uses the live preview")
        s, summary, label = res["settings"], res["summary"], STORED if note is None else LIVE
        ok, conv = _converged([[float(e["top2"]) for e in r["epochs"]] for r in res["runs"]], "test top-2 accuracy")
        pairs, n_train = s["epochs"] * s["pairs_per_epoch"], s.get("n_train") or len(data.y_train)
        budget = _budget(f"experiment 3, {label}: a small-budget preview", [
            ["training pairs", f"{pairs:,} ({s['epochs']} epoch(s) of {s['pairs_per_epoch']:,}), "
             f"{100 * pairs / 60e6:.2g}% of the paper's", "60M, from all of MNIST"],
            ["training digits", f"{n_train:,} (the sample)", "60,000"],
            ["canvas and shifts", f"{s['canvas']}×{s['canvas']}, up to {s['max_shift']} px", "36×36, up to 4 px"],
            ["seeds", str(len(s["seeds"])), "not stated"],
            ["top-2 error reached", f"{mean_std(summary['error'], summary['error_std'], 1)}% on {s['n_test_pairs']:,} "
             "test pairs", "5.2%: a different budget, not compared"],
            ["converged", f"{conv}; {_schedule(res['runs'])}", "not stated"],
            ["CNN baseline", "none trained", "8.1% error"],
            ["can detect", "no comparison: a paired test needs a second model trained on these pairs", ""]])
        return MultiMNIST(res, label, notes, model, model_label, n_train, ok, conv, budget)
    return _read("multimnist", live, build)
