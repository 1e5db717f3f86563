"""The claim ledger: every claim the book tests, in one table, each with the verdict its chapter gives.

- ``claim_ledger()`` reads each experiment chapter's stored runs through that chapter's own reader
  (chapters 7, 9, 10, 11) and repeats chapter 5's measurement on the shipped CapsNet; it judges nothing
  a reader has judged, and chapter 5's two claims, which no reader stores, with ``verdicts.judge``.
- ``Entry``: one claim: whose it is, their number, ours (``verdicts.interval_text``), the budget and
  the verdict, and for a "cannot tell" what it still allows (``verdicts.allows``).
- ``Ledger.table(chapter)``: one chapter's entries as a narrow HTML table; ``Ledger.glued()``: the
  routing numbers the page's opening quotes.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Dict, List, Optional

from capsedu.experiments import ablation, multimnist, robustness, tutorial_vs_fixed
from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.figures.tables import render_table
from capsedu.reports import paper, routing_cost, two_digits
from capsedu.reports.paper_exp23 import ablation_report, multimnist_report
from capsedu.reports.routing import routing_report
from capsedu.reports.stats import paired_difference
from capsedu.reports.verdicts import CANNOT_TELL, FAILS, HOLDS, allows, compare, interval_text, judge, rows_for

__all__ = ["CLAIMS", "ROUTING", "Entry", "Ledger", "claim_ledger"]

T1 = ablation.PAPER_TABLE1
AFF = robustness.PAPER_AFFNIST
# "chapter.n" -> (the claim's key in its chapter's reader, the claim in a few words, whose it is,
#                 their number: theirs, never measured here)
CLAIMS = {
    "3.1": ("coupling", "3 iterations move the coupling away from uniform (mean max c vs 0.1)",
            "the paper; Pechyonkin", "no number (a vote goes where it agrees)"),
    "3.2": ("iterations", "3 iterations at inference classify better than 1 (shipped CapsNet)", "the paper",
            f"Table 1, each trained so: error {T1['r1+recon'][0]}% (r1) vs {T1['r3+recon'][0]}% (r3)"),
    "7.1": ("su_vert", "Su's head names both digits more often than pooling (vertical, top-2)", "Su",
            "over 0.90 vs about 0.40"),
    "7.2": ("march_vert", "... with his March routing", "Su (README)", "about 0.95"),
    "7.3": ("hinton_vert", "... with the paper's routing", "Su (issue)", "60-70%, from memory"),
    "7.4": ("su_conf", "... confident about both (top-2 > 0.5)", "Su", "over 0.90 vs about 0.10"),
    "7.5": ("su_hor", "Su's head beats pooling side by side (horizontal)", "Su (prose)", "none"),
    "7.6": ("march_hor", "... with his March routing", "Su (README)", "none for this layout"),
    "7.7": ("r1_pool", "Summing alone (1 iteration) beats pooling (vertical)", "ours: the control", "-"),
    "7.8": ("r1_vert", "Routing, not summing, makes the advantage (3 vs 1 iteration, vertical)",
            "the paper; Su", "none"),
    "7.9": ("r1_hor", "... horizontal", "the paper; Su", "none"),
    "7.10": ("march_r1_vert", "... with his March routing (vertical)", "the paper; Su", "none"),
    "7.11": ("march_r1_hor", "... with his March routing (horizontal)", "the paper; Su", "none"),
    "7.12": ("hinton_r1_vert", "... with the paper's routing (vertical)", "the paper; Su", "none"),
    "7.13": ("hinton_r1_hor", "... with the paper's routing (horizontal)", "the paper; Su", "none"),
    "9.1": ("rob_cnn", "CapsNet is more robust to affine transformations than a margin-loss CNN",
            "the paper", f"affNIST {AFF['capsnet'][1]:.2f} vs {AFF['cnn'][1]:.2f}"),
    "9.2": ("rob_ce", "... than the paper's own cross-entropy CNN", "the paper",
            f"affNIST {AFF['capsnet'][1]:.2f} vs {AFF['cnn-ce'][1]:.2f}"),
    "9.3": ("abl_route", "Routing lowers the test error (3 vs 1 iteration, with reconstruction)", "the paper",
            f"error {T1['r1+recon'][0]}% → {T1['r3+recon'][0]}%"),
    "9.4": ("abl_recon", "The reconstruction loss lowers the test error (3 iterations)", "the paper",
            f"error {T1['r3'][0]}% → {T1['r3+recon'][0]}%"),
    "9.5": ("abl_route_aff", "Routing raises affine accuracy", "the paper (implied)", "none"),
    "9.6": ("mm", "CapsNet names both of two overlapping digits", "the paper",
            f"MultiMNIST error {multimnist.PAPER_ERROR}%"),
    "10.1": ("routing_test", "Dynamic routing beats uniform coupling (test digits)", "the paper", "none"),
    "10.2": ("routing_affine", "... on the affine set", "the paper", "none"),
    "10.3": ("att_test", "Self-attention routing matches or beats dynamic routing", "Mazzia et al.",
             "error 0.16% (theirs)"),
    "10.4": ("att_cost", "... at a fraction of the routing cost (ms)", "Mazzia et al.", "none"),
    "10.5": ("spread_test", "EM routing on equal terms matches or beats dynamic routing", "Hinton et al. 2018",
             "error 0.44% (theirs)"),
    "10.6": ("spread_affine", "... on the affine set", "Hinton et al. 2018", "none"),
    "11.1": ("gap", "The fixed code beats the tutorial code at one budget (fixed − tutorial)",
             "ours, of the tutorial code", "its log: test batches 0.96, 0.98 after 2 epochs"),
    "11.2": ("report", "Its printed accuracy differs from its network's (printed − longest capsule)",
             "ours, of the tutorial code", "none (it prints the first)"),
    "11.3": ("batch", "A digit's prediction does not depend on the rest of its batch", "the tutorial code (implied)",
             "none"),
}
# routing against uniform coupling, r = 1
ROUTING = ("3.2", "7.8", "7.9", "7.10", "7.11", "7.12", "7.13", "9.3", "9.5", "10.1", "10.2")


@dataclass
class Entry:
    """One claim of the ledger, with what the chapter's reader made of it."""
    id: str
    chapter: str
    claim: str
    whose: str
    theirs: str
    ours: str          # ``verdicts.interval_text`` of the comparison, or the reader's words where there is none
    budget: str
    verdict: str       # holds / does not hold / cannot tell at this budget, from the reader
    allows: str        # ``verdicts.allows``: for a "cannot tell", what its interval still allows ("" otherwise)
    comparison: Optional[Dict]


def _budget(epochs, n_train: int, seeds: int) -> str:
    return f"{epochs} ep., {n_train:,} digits, {seeds} seed{'s' if seeds != 1 else ''}"


def _stored(name: str) -> Dict:
    """The stored run ``results/<name>``; the ledger is about stored runs only, so a missing one is an error."""
    data, note = stored_or_preview(name)
    if data is None:
        raise FileNotFoundError(note)
    return data


def _chapter3(sample, n: int) -> Dict[str, Dict]:
    """Chapter 3's measurement on the shipped CapsNet (``routing_statistics`` over ``n`` test digits), as two
    verdict rows: the coupling against uniform, and 3 iterations against 1 on the same digits."""
    from capsedu.figures.routing_stats import routing_statistics
    from capsedu.training.pretrained import load_capsnet, weights_info
    routed = routing_statistics(load_capsnet(), sample.x_test[:n], sample.y_test[:n], (1, 3))
    coupling = paired_difference(routed[3]["max_c"], [0.1] * n)        # each digit's mean max_j c_ij, against 0.1
    coupling.update(seeds=[0], n_items=n, method="items only", pooled=None, mcnemar=[])
    missed = {r: [i for i, right in enumerate(routed[r]["correct"]) if not right] for r in (1, 3)}
    acc = {r: float(routed[r]["correct"].mean()) for r in (1, 3)}
    iterations = compare({0: acc[3]}, {0: acc[1]}, n, {0: missed[3]}, {0: missed[1]})
    info = weights_info()
    budget = _budget(info["epochs"], info["train_images"], 1) + " (shipped weights)"
    return {"coupling": {"comparison": coupling, "verdict": judge(coupling), "budget": budget,
                         "ours": f"{coupling['mean']:+.4f} [{coupling['low']:+.4f}, {coupling['high']:+.4f}] "
                                 f"over {n:,} digits (max c {routed[3]['max_c'].mean():.3f})",
                         "max_c": float(routed[3]["max_c"].mean())},
            "iterations": {"comparison": iterations, "verdict": judge(iterations), "budget": budget}}


def _chapter7() -> Dict[str, Dict]:
    long, control = two_digits.two_digit_report("two_digits_long"), two_digits.two_digit_report(
        "two_digits_r1", control=True)
    if not (long.stored and control.stored):
        raise FileNotFoundError(long.note or control.note)
    rows = two_digits.verdicts(long, control).rows
    s = long.result["settings"]
    budget = _budget(max(s["epochs"].values()), long.result["meta"]["n_train"], len(s["seeds"]))
    return {key: {**row, "budget": budget} for key, row in rows.items()}


def _chapter9(sample) -> Dict[str, Dict]:
    rob_s, abl_s, mm_s = _stored("robustness"), _stored("ablation"), _stored("multimnist")
    # each reader wants the live preview the page trained, to stand in for a bad folder: the stored run
    # stands in for itself here (the multimnist reader then loads the stored weights, not a live model)
    rob, abl = paper.robustness_report(rob_s, sample), ablation_report(abl_s, sample)
    mm = multimnist_report({**mm_s, "model": None}, sample)
    judged = paper.verdict_table(rob, abl, mm).verdicts        # the chapter's verdicts, Holm-adjusted
    rows = {"rob_cnn": rob.comparisons["rob_cnn"], "rob_ce": rob.comparisons["rob_ce"],
            "abl_route": abl.comparisons[paper.ROUTE], "abl_recon": abl.comparisons[paper.RECON],
            "abl_route_aff": abl.comparisons[paper.ROUTE_AFF]}
    rs, a = rob_s["settings"], abl_s["settings"]
    b_rob = _budget(f"≤ {rs['max_epochs']}", rs["n_train"] or len(sample.y_train) - rs["n_val"], len(rs["seeds"]))
    b_abl = _budget(a["epochs"], a["n_train"] or len(sample.y_train), len(a["seeds"]))
    out = {key: {**row, "verdict": judged[key], "claimed": paper.CLAIMED.get(key),
                 "budget": b_rob if key.startswith("rob") else b_abl} for key, row in rows.items()}
    m = mm_s["settings"]
    out["mm"] = {"comparison": None, "verdict": judged["mm"], "ours": f"top-2 error {mm.error:.1f}% "
                 f"({mm.seeds_text}, no CNN): a small-budget preview",
                 "budget": f"{m['epochs']} ep., {mm.pairs:,} pairs, {mm.seeds_text}"}
    return out


def _chapter10(sample) -> Dict[str, Dict]:
    stored = _stored("compare_routing")
    rep = routing_report(stored, sample)        # the stored run stands in for the live preview
    if rep.final is not rep.stored:
        raise FileNotFoundError(rep.note or f"results/compare_routing lacks {rep.missing}")
    budget = _budget(rep.epochs, rep.n_train, len(stored["settings"]["seeds"]))
    out = {key: {**v.row, "verdict": v.verdict, "budget": budget} for key, v in rep.verdicts.items()}
    c = out["att_cost"]["comparison"]
    if rep.benchmark and c:           # the cost comes from the benchmark's paired rounds, not from training
        out["att_cost"].update(ours=f"{c['mean']:+.2f} ms [{c['low']:+.2f}, {c['high']:+.2f}] (dynamic − attention)",
                               budget=f"{c['n']} paired rounds of the routing-cost benchmark, "
                                      + routing_cost.compared(rep.benchmark))
    return out


def _chapter11(sample) -> Dict[str, Dict]:
    """Chapter 11's claims on its stored run, with the page's own rows (``tutorial_vs_fixed.CLAIMS``)."""
    data = _stored("tutorial_vs_fixed")
    tutorial_vs_fixed.readable(data)
    s, runs = data["settings"], data["runs"]
    n_test = s["n_test"] or len(sample.x_test)
    gap, printed = rows_for(list(tutorial_vs_fixed.CLAIMS), tutorial_vs_fixed.with_printed(runs), n_test)
    budget = _budget(s["epochs"], s["n_train"] or len(sample.x_train), len(gap["comparison"]["seeds"]))
    changed = [r["test_changed_by_batching"] for r in runs if r["model"] == "tutorial"]   # seed by seed
    return {"gap": {**gap, "budget": budget},
            "report": {**printed, "verdict": HOLDS if printed["verdict"] != CANNOT_TELL else CANNOT_TELL,
                       "budget": budget},
            "batch": {"comparison": None, "budget": budget,
                      "verdict": FAILS if min(changed) > 0 else HOLDS if max(changed) == 0 else CANNOT_TELL,
                      "ours": f"changed for {', '.join(map(str, changed))} of {n_test:,} digits, seed by seed"}}


@dataclass
class Ledger:
    """Every entry, in the order of ``CLAIMS``."""
    entries: List[Entry]
    max_c: float                     # chapter 5: mean max_j c_ij after 3 iterations (uniform: 0.1)
    n_digits: int                    # chapter 5's test digits

    def __getitem__(self, claim_id: str) -> Entry:
        return next(e for e in self.entries if e.id == claim_id)

    def table(self, chapter: str) -> str:
        """HTML: one chapter's claims, in five short columns; the budget and the full verdict below each."""
        rows = [[e.id, e.claim, f"{e.whose}: {e.theirs}", e.ours, e.verdict]
                for e in self.entries if e.chapter == chapter]
        notes = "".join(f"<li><small>{e.id}: {escape(e.budget)}" + (f"; {escape(e.allows)}" if e.allows else "")
                        + "</small></li>" for e in self.entries if e.chapter == chapter)
        return (render_table(["", "claim", "whose: their number", "ours: difference [95% interval]", "verdict"],
                             rows, html=True) + f"<p><small>Budget (epochs, training digits, seeds), and what a "
                f"\"cannot tell\" still allows:</small></p><ul>{notes}</ul>")

    def glued(self) -> Dict[str, object]:
        """The numbers and words of the routing paragraph: each routing row's mean, interval and verdict."""
        out = {"ledger_n": len(self.entries), "ledger_max_c": self.max_c, "ledger_n_digits": self.n_digits,
               "ledger_way": 100 * (self.max_c - 0.1) / 0.9}    # per cent of the way from uniform to one-hot
        for claim_id in ROUTING:
            e, key = self[claim_id], "ledger_" + claim_id.replace(".", "_")
            c = e.comparison
            out.update({key: c["mean"], key + "_ci": f"{c['low']:+.3f} to {c['high']:+.3f}",
                        key + "_verdict": e.verdict})
        for name, word in (("holds", HOLDS), ("fails", FAILS), ("cannot", CANNOT_TELL)):
            out[f"ledger_count_{name}"] = sum(e.verdict == word for e in self.entries)
        return out


def claim_ledger(n_digits: int = 1000) -> Ledger:
    """Every claim of ``CLAIMS`` with its verdict, from the stored runs and the shipped weights (chapter 5
    over the first ``n_digits`` test digits of the embedded sample, as chapter 5 measures it)."""
    from capsedu.data.mnist import load_dataset
    sample = load_dataset("mnist", source="sample", verbose=False)
    ch3 = _chapter3(sample, n_digits)
    rows = {"3": ch3, "7": _chapter7(), "9": _chapter9(sample), "10": _chapter10(sample),
            "11": _chapter11(sample)}
    entries = []
    for claim_id, (key, claim, whose, theirs) in CLAIMS.items():
        chapter = claim_id.split(".")[0]
        row = rows[chapter][key]
        c = row.get("comparison")
        ours = row.get("ours") or (interval_text(c) if c else "not stored")
        entries.append(Entry(claim_id, chapter, claim, whose, theirs, ours, row["budget"], row["verdict"],
                             allows(row), c))
    return Ledger(entries, ch3["coupling"]["max_c"], n_digits)
