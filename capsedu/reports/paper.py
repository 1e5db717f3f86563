"""Chapter 9's readers: the paper's three experiments as the page prints them, from the stored runs.

``robustness_report`` (here) and ``capsedu.reports.paper_exp23``'s ``ablation_report`` and
``multimnist_report`` each read their experiment's folder (``capsedu.experiments.shared.runs.stored_or_preview``)
and turn it into what the chapter shows: the provenance lines, the budget box, the tables, the findings
in words and the numbers the prose quotes. Building a report touches everything the page reads, so it
is the folder's check: a folder that is missing, damaged or lacks a key falls back to the live preview
the page just trained (the same dicts), after the one line saying why. ``verdict_table`` puts the claims
of all three side by side. Tables and boxes are HTML strings, findings Markdown: the notebook displays them.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import numpy as np

from capsedu.experiments import ablation, robustness
from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.figures.tables import mean_std, noted_table, render_table
from capsedu.reports.stats import detectable_difference
from capsedu.reports.verdicts import (CANNOT_TELL, adjust, detectable_text, holm_text, interval_text, rows_for,
                                      table_note, verdict_text)

__all__ = ["ORDER", "T1_DIFFS", "ran", "robustness_table", "curve_series", "robustness_report", "verdict_table",
           "Robustness", "Failures", "Verdicts"]

STORED, LIVE = "the stored run", "the live preview"
ORDER = ("cnn-ce", "cnn", "capsnet")     # the paper's CNN beside the margin-loss one, then CapsNet
SETTLED = 0.005   # a per-epoch curve that rose by more than this over its last two epochs was still learning
T1 = ablation.PAPER_TABLE1               # the paper's Table 1: how much each change lowered its error, in points of %
T1_DIFFS = {"routing, no reconstruction": T1["r1"][0] - T1["r3"][0],
            "routing, with reconstruction": T1["r1+recon"][0] - T1["r3+recon"][0],
            "reconstruction, r1": T1["r1"][0] - T1["r1+recon"][0], "reconstruction, r3": T1["r3"][0] - T1["r3+recon"][0]}
ROUTE, RECON, ROUTE_AFF = ("r1+recon", "r3+recon", "acc"), ("r3", "r3+recon", "acc"), ("r1+recon", "r3+recon", "affine_acc")


def _rank(model: str) -> int:
    return ORDER.index(model) if model in ORDER else len(ORDER)


def ran(result: Dict) -> str:
    """How long a result trained, and where: "176 s on <hardware>"."""
    return f"{result['seconds']:.0f} s on {result['hardware']}"


def _provenance(res: Dict, planned: int) -> str:
    return (f"stored run: {res['command']}\n  started {res['date']} on {res['hardware']}, torch {res['torch']}; "
            f"{len(res['runs'])} of {planned} trainings finished, {res['seconds'] / 3600:.1f} h of training")


def _schedule(runs: List[Dict]) -> str:
    "What the learning rate did, from the per-epoch records: a schedule can flatten a curve that still learns."
    lrs = sorted({e["lr"] for r in runs for e in r["epochs"] if "lr" in e})
    if not lrs:
        return "learning rate not stored"
    if len(lrs) == 1:
        return f"Adam, constant learning rate {lrs[0]:g} (no schedule flattens the tail)"
    return f"learning rate from {max(lrs):g} down to {min(lrs):g}: a flat tail may be the schedule's"


def _converged(curves: List[List[float]], what: str, k: int = 2, stopped: Optional[int] = None
               ) -> Tuple[Optional[bool], str]:
    """(True/False/None, words): did the per-epoch ``curves`` (one per training) still rise over the last k epochs?
    ``stopped``: how many were stopped by patience (None: no patience); any other ran to the epoch cap, and a
    training the cap stopped is not called converged, however flat its tail."""
    gains = [c[-1] - c[-1 - k] for c in curves if len(c) > k]
    capped = len(curves) - stopped if stopped is not None else 0
    early = f"; {stopped} of {len(curves)} stopped by patience" if stopped else ""
    if not gains:
        return None, f"cannot tell: fewer than {k + 1} epochs of {what} stored"
    gain = float(np.mean(gains))
    over = f"the mean of {len(gains)} trainings" if len(gains) > 1 else "one training"
    change = f"{what} changed by {gain:+.3f} over the last {k} epochs ({over})"
    if capped:
        cap = max(len(c) for c in curves)
        return False, (f"not converged (epoch cap): {capped} of {len(curves)} trainings stopped at the {cap}-epoch "
                       f"cap; {change}")
    return gain <= SETTLED, f"{'about converged' if gain <= SETTLED else 'not converged'}: {change}{early}"


def _budget(title: str, rows: List[List[str]]) -> str:
    # HTML: a notebook's Markdown output shows no tables
    return f"<p><b>Budget box: {title}</b></p>" + render_table(["", "this run", "the paper's"], rows, html=True)


def _detect(n: int, accuracy: float) -> float:
    return detectable_difference(n, float(np.clip(accuracy, 0.01, 0.99)))


def _ci(c: Optional[Dict], missing: str) -> str:
    return f"{c['low']:+.3f} to {c['high']:+.3f}" if c and c["low"] is not None else "none (one seed)" if c else missing


def _read(name: str, live: Dict, build):
    """``build(stored, None)`` of the folder ``results/<name>``; where building it fails (the folder is missing,
    damaged, or lacks a key the page reads), ``build(live, the one line that says so)``."""
    made = []
    stored, note = stored_or_preview(name, lambda data: made.append(build(data, None)))
    return made[0] if stored is not None else build(live, note)


# ---------------------------------------------------------------- experiment 1: robustness

def robustness_table(res: Dict) -> str:
    """Mean ± std over seeds at the matched epochs: validation, shifted test, each affine strength (HTML)."""
    strengths = res["summary"]["strengths"]
    keys = ["val", "clean"] + [f"affine@{s:g}" for s in strengths]
    heads = ["model", "loss", "parameters", "seeds", "epoch(s) read", "validation", "shifted test"] + [
        f"affine s={s:g}" for s in strengths]
    rows = [[r["model"], r["loss"], f"{r['params']:,}", r["seeds"], ", ".join(map(str, r["epochs"]))]
            + [mean_std(r[k], r[k + "_std"]) for k in keys]
            for r in sorted(res["summary"]["table"], key=lambda r: _rank(r["model"]))]
    return render_table(heads, rows, html=True)


def curve_series(res: Dict) -> List[Tuple[str, List[float], np.ndarray, np.ndarray]]:
    """(model, strengths, mean accuracy, std) per model at the matched epochs: the accuracy-strength curves."""
    s = res["summary"]["strengths"]
    return [(r["model"], s, np.array([r[f"affine@{v:g}"] for v in s]),
             np.array([r[f"affine@{v:g}_std"] or 0.0 for v in s]))
            for r in sorted(res["summary"]["table"], key=lambda r: _rank(r["model"]))]


@dataclass
class Failures:
    """Affine test digits that the CNN or CapsNet (first seed) gets wrong, and how to redraw that test set."""
    strength: float
    n_test: Optional[int]
    canvas: int
    test_seed: int
    groups: List[Tuple[str, List[Tuple[int, str]]]]   # (title, [(test index, the wrong prediction(s) in words)])


@dataclass
class Robustness:
    """Experiment 1 as the page prints it, from ``result``: ``every`` holds all its runs, ``result`` the ones
    its table matches (a partial stored run: the CNN and CapsNet re-matched on their own)."""
    result: Dict
    every: Dict
    label: str
    notes: List[str]          # printed before the budget box: the provenance, or why the live preview stands in
    n: int                    # the shifted and affine test sets' size
    top: float                # the strongest affine strength
    detect: float
    converged: str
    budget: str
    comparisons: Dict[str, Dict]   # claim key -> verdict row (``rows_for``)
    missing: Dict[str, str]        # claim key -> why it has no comparison
    failures: Optional[Failures]

    stored = property(lambda self: self.label == STORED)
    table = property(lambda self: robustness_table(self.result))
    curves = property(lambda self: curve_series(self.result))
    gap = property(lambda self: (self.comparisons["rob_cnn"]["comparison"] or {"mean": float("nan")})["mean"])
    gap_ci = property(lambda self: _ci(self.comparisons["rob_cnn"]["comparison"], "none (one seed)"))
    verdict = property(lambda self: self.comparisons["rob_cnn"]["verdict"])
    models = property(lambda self: {r["model"] for r in self.every["runs"]})

    def accuracy(self, model: str) -> float:
        "The model's mean accuracy at the strongest strength (NaN where the table lacks it)."
        rows = {r["model"]: r for r in self.result["summary"]["table"]}
        return rows[model][f"affine@{self.top:g}"] if model in rows else float("nan")

    def said(self, key: str, set_name: str) -> str:
        "A comparison in words, with the test set McNemar refers to."
        c = self.comparisons[key]["comparison"]
        if c is None:
            return self.missing[key]
        return interval_text(c) + (f" (McNemar on the {set_name} test digits)" if c["mcnemar"] else "")

    def findings(self) -> str:
        "What experiment 1 shows, in Markdown: each pair of models, a minus b, seed by seed."
        top, v = f"strength-{self.top:g}", self.comparisons
        gap = robustness.PAPER_AFFNIST["capsnet"][1] - robustness.PAPER_AFFNIST["cnn-ce"][1]
        return "\n".join([
            f"**From {self.label}** ({len(self.result['settings']['seeds'])} seed(s) planned; differences are a minus b).",
            f"- Matching, shifted test digits, CapsNet − CNN: {self.said('rob_clean', 'shifted')}.",
            f"- At strength {self.top:g}, CapsNet − margin-loss CNN: {self.said('rob_cnn', top)}; "
            f"verdict on 'CapsNet is more robust': *{v['rob_cnn']['verdict']}*.",
            f"- At strength {self.top:g}, CapsNet − cross-entropy CNN (the paper's baseline): {self.said('rob_ce', top)}"
            + (f"; verdict: *{v['rob_ce']['verdict']}*." if v["rob_ce"]["comparison"] else "."),
            f"- The loss alone, margin − cross-entropy CNN: {self.said('rob_loss', top)}.",
            f"- The paper's gap on affNIST, CapsNet − its CNN: {gap:+.2f}. "
            f"On {self.n:,} test digits one seed's paired test finds a difference of {self.detect:.3f} 4 times in 5; "
            "smaller ones it mostly misses."])


def _rematched(res: Dict) -> Tuple[Dict, Optional[str]]:
    """``res``, or (a partial folder: no seed has all its models yet) the CNN and CapsNet matched on their own."""
    s, have = res["settings"], {r["model"] for r in res["summary"]["table"]}
    if {"cnn", "capsnet"} <= have or not {"cnn", "capsnet"} <= set(s["models"]):
        return res, None
    sub = {**s, "models": ["cnn", "capsnet"]}
    summary = robustness.summarise(res["runs"], SimpleNamespace(**sub))
    if not summary["table"]:
        return res, None
    return {**res, "settings": sub, "summary": summary}, "no seed has all its models yet: cnn and capsnet are matched on their own"


def _pair_runs(res: Dict, a: str, b: str, top: str) -> List[Dict]:
    """The matched records of models a and b, matched on their own: a seed still missing a third model stays in."""
    models = [m for m in (a, b) if m in {r["model"] for r in res["runs"]}]
    recs = robustness.matched_runs({**res, "settings": {**res["settings"], "models": models}}) if len(models) == 2 else []
    for rec in recs:   # an older run stored only its wrong answers at the strongest set: its misses there
        if "misses" not in rec and "wrong" in rec:
            rec["misses"] = {top: sorted(i for i, _ in rec["wrong"])}
    return recs


def _failures(res: Dict) -> Optional[Failures]:
    f, s = res["summary"]["failures"], res["settings"]
    if not f:   # empty until one seed has both models
        return None
    return Failures(f["strength"], s["n_test"], s["canvas"], s["test_seed"], [
        ("only the CNN wrong", [(i, f"CNN {p}") for i, p in f["cnn_only"]]),
        ("only CapsNet wrong", [(i, f"caps {p}") for i, p in f["capsnet_only"]]),
        ("both wrong", [(i, f"CNN {p}, caps {q}") for i, p, q in f["both"]])])


def robustness_report(live: Dict, data) -> Robustness:
    """Experiment 1 from ``results/robustness``, or from ``live`` (the preview's result); ``data``: the data set
    whose sizes stand where the settings say None."""
    def build(res, note):
        every, notes = res, [note] if note else []
        if note is None:
            s = res["settings"]
            notes = [_provenance(res, len(s["models"]) * len(s["seeds"])),
                     "  models stored: " + ", ".join(sorted({r["model"] for r in res["runs"]}, key=_rank))]
            res, why = _rematched(res)
            notes += [f"  {why}"] if why else []
        s, summary = res["settings"], res["summary"]
        n, top = s["n_test"] or len(data.y_test), max(summary["strengths"])
        key, rows = f"affine@{top:g}", {r["model"]: r for r in summary["table"]}
        runs = [r for r in res["runs"] if r["model"] in s["models"]]
        _, conv = _converged([[e["val"] for e in r["epochs"]] for r in runs], "validation accuracy",
                             stopped=sum(len(r["epochs"]) < s["max_epochs"] for r in runs))
        claims = [dict(key="rob_clean", a="capsnet", b="cnn", field="clean", misses="clean"),
                  dict(key="rob_cnn", a="capsnet", b="cnn", field=key, misses=key),
                  dict(key="rob_ce", a="capsnet", b="cnn-ce", field=key, misses=key),
                  dict(key="rob_loss", a="cnn", b="cnn-ce", field=key, misses=key)]
        have = {r["model"] for r in every["runs"]}
        missing = {c["key"]: "no seed has both models yet" if {c["a"], c["b"]} <= have else
                   f"not stored yet (this run predates {c['b'] if c['b'] not in have else c['a']})" for c in claims}
        comparisons = {c["key"]: rows_for([c], _pair_runs(every, c["a"], c["b"], key), n, correct=False)[0]
                       for c in claims}
        paired = (comparisons["rob_cnn"]["comparison"] or {}).get("detectable")
        detect = paired or _detect(n, np.mean([r[key] for r in rows.values()]) if rows else 0.85)
        how = "one seed's paired test, capsnet − cnn" if paired else "two independent test sets: no misses stored"
        label = STORED if note is None else LIVE
        budget = _budget(f"experiment 1, {label}", [
            ["models", ", ".join(m for m in ORDER if m in {r["model"] for r in every["runs"]}),
             "CapsNet and a cross-entropy CNN"],
            ["epochs", f"up to {s['max_epochs']} (patience {s['patience']}); {_schedule(runs)}", "not stated (stopped early)"],
            ["training digits", f"{(s['n_train'] or len(data.y_train) - s['n_val']):,} (+{s['n_val']:,} validation)",
             "60,000 (all of MNIST)"],
            ["canvas and shifts", f"{s['canvas']}×{s['canvas']}, up to {s['max_shift']} px", "40×40, placed at random (up to 6 px)"],
            ["seeds", str(len(s["seeds"])), "not stated"],
            ["accuracy reached", "; ".join(f"{m} {rows[m]['clean']:.3f} shifted, {rows[m][key]:.3f} at s = {top:g}"
                                           for m in ORDER if m in rows) or "no seed has every model yet",
             "CapsNet 0.9923, CNN 0.9922 shifted; 0.79 and 0.66 on affNIST"],
            ["converged", conv, "stopped early"],
            ["can detect", f"differences of {detect:.3f} or more on {n:,} test digits at s = {top:g} ({how}; 5% "
             "false alarms, 80% power)", "10,000 MNIST and 320,000 affNIST test digits"]])
        return Robustness(res, every, label, notes, n, top, detect, conv, budget, comparisons, missing,
                          _failures(res) or (_failures(live) if res is not live else None))
    return _read("robustness", live, build)


# ---------------------------------------------------------------- the verdicts of all three

def _why(row: Dict, missing: str, extra: str = "") -> str:
    "What the verdict rests on, beyond the interval: the pooled McNemar test, where the runs come from."
    c = row["comparison"]
    if c is None:
        return missing
    if c["pooled"]:
        m = c["pooled"]
        digits = "digit" if m["only_a"] == 1 else "digits"
        extra = (f"McNemar, {m['seeds']} seeds pooled: {m['only_a']} {digits} only {row['a']} gets right, "
                 f"{m['only_b']} only {row['b']}" + extra)
    return ("one seed: no interval" + extra) if c["low"] is None else extra.removeprefix("; ")


PRIMARY = ("rob_ce", "abl_route")   # the paper's headline claims of experiments 1 and 2; the rest are Holm-adjusted
CLAIMED = {"rob_cnn": (0.13, "the paper's affNIST gap"), "rob_ce": (0.13, "the paper's affNIST gap"),
           "abl_route": (T1_DIFFS["routing, with reconstruction"] / 100, "the paper's Table 1"),
           "abl_recon": (T1_DIFFS["reconstruction, r3"] / 100, "the paper's Table 1")}


@dataclass
class Verdicts:
    """One row per claim of the paper (HTML ``table``), its verdict per key, and the numbers the conclusion quotes."""
    table: str
    verdicts: Dict[str, str]
    values: Dict[str, object]   # "route", "route_ci", "recon", ..., "ce_said": the differences in the prose


def verdict_table(rob: Robustness, abl, mm) -> Verdicts:
    """The claims of experiments 1 and 2 with their verdicts, and experiment 3's preview, which gives none
    (``abl``, ``mm``: ``capsedu.reports.paper_exp23``'s reports)."""
    canvas = rob.result["settings"]["canvas"]
    top_set = f"strength-{rob.top:g} affine test ({canvas}×{canvas})"
    where = f"; from {abl.label} on {abl.canvas}" + ("" if abl.papers else " (not the paper's 28×28, 2 px)")
    t1 = f"; the paper's difference is far smaller than {abl.n:,} test digits can detect"
    strength = abl.result["settings"]["affine_strength"]
    v, a = rob.comparisons, abl.comparisons
    claims = {
        "rob_cnn": ("CapsNet is more robust to affine transformations than a CNN matched on clean accuracy "
                    "(the paper: 79% vs 66% on affNIST)", "the paper; Gu, Tresp & Hu: not against a margin-loss CNN",
                    "capsnet − cnn", top_set, v["rob_cnn"], f"; from {rob.label}"),
        "rob_ce": ("... than the paper's own cross-entropy CNN (the control)", "the paper", "capsnet − cnn-ce", top_set,
                   v["rob_ce"], f"; from {rob.label}"),
        "abl_route": ("Routing (3 iterations instead of 1) lowers the test error (Table 1, with reconstruction: "
                      "0.29% → 0.25%)", "the paper", "r3+recon − r1+recon (accuracy)", "shifted test", a[ROUTE], t1 + where),
        "abl_recon": ("The reconstruction loss lowers the test error (Table 1, 3 iterations: 0.35% → 0.25%)",
                      "the paper", "r3+recon − r3 (accuracy)", "shifted test", a[RECON], t1 + where),
        "abl_route_aff": ("Routing raises affine accuracy", "the paper (implied); Gu & Tresp: it does not",
                          "r3+recon − r1+recon", f"affine s = {strength:g}", a[ROUTE_AFF], where)}
    judged = adjust([{**row, "key": key, "primary": key in PRIMARY, "claimed": CLAIMED.get(key)}
                     for key, (*_, row, _) in claims.items()])
    rows, verdicts = [], {}
    for (key, (claim, whose, diff, test_set, _, extra)), row in zip(claims.items(), judged):
        c, missing = row["comparison"], rob.missing.get(key, "not stored yet")
        verdicts[key] = row["verdict"]
        rows.append([claim, whose, diff, test_set, interval_text(c) if c else missing, holm_text(row),
                     detectable_text(c), verdict_text(row, digits=4 if key.startswith("abl") else 3),
                     _why(row, missing, extra)])
    verdicts["mm"] = CANNOT_TELL
    rows.append(["CapsNet names both of two overlapping digits (the paper: 5.2% error on MultiMNIST)", "the paper",
                 "no comparison", f"{mm.n_test_pairs:,} test pairs", f"top-2 error {mm.error:.1f}% ({mm.seeds} seed)", "",
                 CANNOT_TELL, f"a small-budget preview ({100 * mm.share:.2g}% of the paper's pairs, "
                 f"{mm.converged.split(':')[0]}, no CNN baseline): no verdict against the paper"])
    c = v["rob_ce"]["comparison"]
    values = {"ce_said": f"*{verdicts['rob_ce']}* (difference {interval_text(c)})" if c else rob.missing["rob_ce"]}
    for name, row in (("route", a[ROUTE]), ("recon", a[RECON]), ("ce", v["rob_ce"]), ("loss", v["rob_loss"])):
        values[name] = row["comparison"]["mean"] if row["comparison"] else float("nan")
        values[f"{name}_ci"] = _ci(row["comparison"], "not stored yet")
    table = noted_table(["claim", "whose", "difference", "test set", "ours: mean [95% interval], p; McNemar",
                         "Holm p", "detectable (paired)", "verdict", "why"], rows) + table_note(
        judged, "CapsNet against the paper's CNN; routing with reconstruction")
    return Verdicts(table, verdicts, values)
