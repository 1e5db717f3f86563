"""Chapter 10's reader: the routing comparison, from its stored runs or the live preview standing in.

``routing_report(preview, data)`` reads ``results/compare_routing`` once, through
``capsedu.experiments.shared.runs.stored_or_preview`` (a missing, damaged or incomplete folder is one
printed line, and the preview stands in, labelled), and the newest routing-cost benchmark. The
``RoutingReport`` it returns holds what the page prints (tables, budget box, figures, verdict rows)
and the numbers its prose and its hidden checks use, so no chapter cell reads a stored key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

from capsedu.data.mnist import load_dataset
from capsedu.data.transforms import AFFINE_RANGES, random_affine
from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.figures.tables import mean_std, noted_table, render_table
from capsedu.reports import routing_cost
from capsedu.reports.stats import detectable_difference
from capsedu.reports.verdicts import (CANNOT_TELL, FAILS, HOLDS, adjust, allows, holm_text, interval_text, judge,
                                      p_text, rows_for, table_note)

__all__ = ["ORIGINAL", "CLAIMS", "Verdict", "RoutingReport", "preview_text", "runs_table", "routing_report"]

STORED = "compare_routing"
ORIGINAL = ("dynamic", "none", "em", "attention")  # the first stored run's methods; "em-spread" came later
RISING = 0.005     # a gain over the last three epochs above this: still rising, the number is a lower bound
MAKE = ("Make the stored run with:\n  python -m capsedu compare-routing --preset long --out results/compare_routing\n"
        "(rerun the same command after an interruption).")
CLAIMS = [  # a minus b, claimed to be positive
    dict(key="routing_test", claim="Dynamic routing beats no routing (uniform coupling) on test digits",
         whose="Sabour et al. 2017 (routing's premise)", a="dynamic", b="none", field="test", misses="test"),
    dict(key="routing_affine", claim="... and on the affine set (0.5, 28×28)", whose="Sabour et al. 2017",
         a="dynamic", b="none", field="affine", misses="affine"),
    dict(key="att_test", claim="Self-attention matches or beats dynamic routing on test digits",
         whose="Mazzia et al. 2021", a="attention", b="dynamic", field="test", misses="test"),
    dict(key="att_cost", claim="... at a fraction of the routing cost (dynamic − attention, ms)",
         whose="Mazzia et al. 2021", a="dynamic", b="attention", field="routing_fwd_bwd_ms"),
    dict(key="spread_test", claim="EM routing on equal terms (em-spread) matches or beats dynamic routing",
         whose="Hinton et al. 2018", a="em-spread", b="dynamic", field="test", misses="test"),
    dict(key="spread_affine", claim="... on the affine set (0.5, 28×28)", whose="Hinton et al. 2018",
         a="em-spread", b="dynamic", field="affine", misses="affine"),
]
PRIMARY = ("routing_test", "att_test", "spread_test")   # one per routing, on test digits; the rest: Holm
WHY = {HOLDS: "the interval lies above zero", FAILS: "the interval lies below zero: the other side is ahead",
       CANNOT_TELL: "the interval includes zero"}
WORDS = {FAILS: "uniform coupling is ahead", CANNOT_TELL: "the two cannot be told apart",
         HOLDS: "routing is ahead", "pending": "pending"}
_EM_PAPER = "Hinton et al. 2018: 0.44% MNIST test error, about 310K parameters, spread loss"
PAPERS = {"dynamic": "Sabour et al. 2017: 0.35% test error without reconstruction, 0.25% with (3 iterations)",
          "em": _EM_PAPER, "em-spread": _EM_PAPER, "none": "-",
          "attention": "Mazzia et al. 2021: 0.16% MNIST test error as reported by the authors, with reconstruction"}
LABELS = {"em": "EM (small)", "em-spread": "EM-spread"}


def _check(d: Dict) -> None:
    """Every field the page reads; a missing one raises (KeyError, ...), and the preview stands in."""
    s = d["settings"]
    [s[k] for k in ("methods", "seeds", "epochs", "batch_size", "lr", "shift", "source", "n_train", "n_test",
                    "affine_strength", "test_seed")]
    [d[k] for k in ("command", "date", "hardware", "torch", "seconds")]
    for r in d["runs"]:
        [r[k] for k in ("method", "seed", "params", "test", "affine", "routing_fwd_bwd_ms")]
        [(e["epoch"], e["test"], e["affine"]) for e in r["epochs"]] + [r["epochs"][-1], r["epoch_seconds"][0]]
    for r in d["summary"]["table"]:
        [r[k] for k in ("method", "params", "seeds", *(f + s for f in ("test", "affine", "epoch_seconds",
                        "routing_fwd_ms", "routing_fwd_bwd_ms") for s in ("", "_std")))]
    if not d["summary"]["table"]:
        raise ValueError("empty summary table")


def preview_text(preview: Dict) -> str:
    return f"preview trained in {preview['seconds']:.0f} s on {preview['hardware']}"


def runs_table(result: Dict, title: str) -> str:
    """The HTML table of one comparison (the preview or the stored run), one row per method, under ``title``."""
    rows = [[r["method"], f"{r['params']:,}", mean_std(r["test"], r["test_std"]),
             mean_std(r["affine"], r["affine_std"]), mean_std(r["epoch_seconds"], r["epoch_seconds_std"], 1),
             mean_std(r["routing_fwd_ms"], r["routing_fwd_ms_std"], 1),
             mean_std(r["routing_fwd_bwd_ms"], r["routing_fwd_bwd_ms_std"], 1), r["seeds"]]
            for r in result["summary"]["table"]]
    return f"<p><b>{title}</b></p>" + render_table(
        ["method", "params", "test acc.", "affine (0.5, 28×28) acc.", "s / epoch", "routing fwd ms",
         "routing fwd+bwd ms", "seeds"], rows, html=True)


def _state(g: Optional[float]) -> str:
    return "too few epochs to judge" if g is None else (f"still rising (+{g:.3f}): a lower bound" if g > RISING
                                                        else f"flat ({g:+.3f}): converged at this budget")


@dataclass
class Verdict:
    """One claim of ``CLAIMS`` judged: holds, does not hold, cannot tell, or pending (no em-spread yet)."""
    key: str
    claim: str
    whose: str
    a: str
    b: str
    verdict: str
    comparison: Optional[Dict]   # ``capsedu.reports.verdicts.compare``'s numbers; None: a method has no run
    row: Dict                    # its verdict row: "primary", "p_holm", "family" (``verdicts.adjust``)


@dataclass
class RoutingReport:
    """What chapter 10 prints about the comparison. ``final``: what the page judges, the stored run when
    it has each of ``ORIGINAL``, else the preview (``source`` says which, on every table)."""
    preview: Dict
    stored: Optional[Dict]
    note: Optional[str]              # why the preview stands in for an unreadable folder
    missing: List[str]               # original methods the readable stored run lacks
    final: Dict
    benchmark: Optional[Dict]        # the newest routing-cost benchmark (with its "file")
    source: str
    params: Dict[str, int]           # method -> parameters, in the table's order
    rising: Dict[str, Optional[float]]  # method -> gain of the last 3 epochs over the 3 before
    n_train: int
    n_test: int
    epochs: int
    train_shift: int                 # the training shifts' range, px
    shift_px: float                  # the affine set's mean shift, px
    detectable: float
    verdicts: Dict[str, Verdict]

    @property
    def from_stored(self) -> bool:
        return self.final is self.stored

    @property
    def has_spread(self) -> bool:
        return any(r["method"] == "em-spread" for r in self.final["runs"])

    @property
    def cost_source(self) -> str:
        return (f"the routing-cost benchmark, {self.benchmark['file']}" if self.benchmark
                else f"{self.source}, timed once per training")

    def _runs(self, name: str) -> List[Dict]:
        return [r for r in self.final["runs"] if r["method"] == name]

    def cost_values(self, name: str) -> List[float]:
        """fwd + bwd ms of a method: the benchmark's rounds, or without it the seeds' loaded timings."""
        if self.benchmark:
            return self.benchmark["methods"][name]["routing_fwd_bwd_ms"]
        return [r["routing_fwd_bwd_ms"] for r in self._runs(name)]

    def cost_of(self, name: str) -> float:
        return float(np.median(self.cost_values(name)))

    def equal_ratios(self) -> Dict[int, float]:
        return routing_cost.equal_ratios(self.benchmark)

    def stored_text(self) -> str:
        """The stored run's provenance, or the line saying why the preview stands in."""
        if self.stored is None:
            return f"{self.note}\n{MAKE}"
        d, s = self.stored, self.stored["settings"]
        when = f"started {d['date']}" + (f", last written {d['written']}" if "written" in d else "")
        return (f"stored run: {d['command']}\n  {when}, {d['hardware']}, torch {d['torch']}; "
                f"{d['seconds'] / 3600:.1f} h of training; {len(d['runs'])} of {len(s['methods']) * len(s['seeds'])} "
                f"trainings finished; methods planned: {', '.join(s['methods'])}")

    def per_seed_text(self) -> str:
        """Seconds per epoch seed by seed (a seed slowed from outside stands out), and what is missing."""
        per_seed = {m: [round(sum(r["epoch_seconds"]) / len(r["epoch_seconds"]), 1) for r in self.stored["runs"]
                        if r["method"] == m] for m in self.stored["settings"]["methods"]}
        text = f"seconds per epoch, seed by seed: {per_seed}"
        if self.missing:
            text += (f"\nnot yet trained in the stored run: {', '.join(self.missing)}; "
                     "the rest of the page uses the preview")
        return text

    def budget_html(self) -> str:
        """The budget box: what the comparison rests on, ours against the papers'."""
        s, k = self.final["settings"], float(self.final["settings"]["affine_strength"])
        by = {r["method"]: r for r in self.final["summary"]["table"]}
        rows = [
            ["training digits", f"{self.n_train:,} ({s['source']}), shifted by up to {s['shift']} px",
             "Sabour et al. 2017: all 60,000 MNIST training digits, shifted by up to 2 px"],
            ["epochs, batch, optimiser", f"{s['epochs']} epoch{'s' if s['epochs'] != 1 else ''}, batch "
             f"{s['batch_size']}, Adam, constant lr {s['lr']}", "their own schedules, not repeated here"],
            ["seeds", f"{len(s['seeds'])} planned; trained: " + ", ".join(f"{n} {r['seeds']}" for n, r in by.items()),
             "Sabour et al. 2017: mean of 3 trials"],
            ["test digits", f"{self.n_test:,}: one seed's paired test detects {self.detectable:.3f}", "10,000 MNIST test digits"],
            ["affine set", f"strength {k}, 28×28: rotation ±{AFFINE_RANGES['rotation_deg'] * k:g}°, shear "
             f"±{AFFINE_RANGES['shear'] * k:g}, scale ±{AFFINE_RANGES['scale'] * k:g}, mean shift {self.shift_px:.1f} px",
             "affNIST (40×40) in chapter 9 and in Sabour et al. 2017"]]
        rows += [[f"{n}: test, affine (0.5, 28×28)", f"{r['test']:.3f}, {r['affine']:.3f} (mean of {r['seeds']}); "
                  f"{_state(self.rising[n])}", PAPERS.get(n, "-")] for n, r in by.items()]
        return (f"<p><b>Budget box</b>, {self.source}</p>"
                + render_table(["", "ours", "the papers' (theirs, not measured here)"], rows, html=True))

    def cost_text(self) -> str:
        """The benchmark's provenance, or the line saying the stored run's timings stand in."""
        if self.benchmark is None:
            return f"no routing-cost benchmark stored; the cost below is {self.cost_source}"
        return routing_cost.provenance_text(self.benchmark)

    def cost_html(self) -> str:
        """Per method the median and range over the benchmark's rounds ("" without a benchmark)."""
        return routing_cost.table_html(self.benchmark) if self.benchmark else ""

    def ties_html(self) -> str:
        """Per method, how often test and affine accuracy tie exactly (final, and over the last 8 epochs)."""
        start, rows = max(1, self.epochs - 7), []
        for n in self.params:
            mine = self._runs(n)
            late = [(r["seed"], e) for r in mine for e in r["epochs"] if e["epoch"] >= start]
            tied = [(s, e["epoch"]) for s, e in late if e["test"] == e["affine"]]
            rows.append([LABELS.get(n, n), f"{sum(r['test'] == r['affine'] for r in mine)} of {len(mine)}",
                         f"{len(tied)} of {len(late)}", f"{np.mean([e['test'] - e['affine'] for _, e in late]):+.4f}",
                         ", ".join(f"seed {s} ep {ep}" for s, ep in tied) or "-"])
        return render_table(["method", "final test = affine (seeds)", f"ties, epochs {start} on",
                             "mean test − affine", "where"], rows, html=True)

    def verdict_text(self) -> str:
        return (f"verdicts from {self.source}; on {self.n_test:,} test digits one seed's paired test detects a "
                f"difference of {self.detectable:.3f} (dynamic − none)")

    def verdicts_html(self, cap_em: float) -> str:
        """The verdict table; the small EM network's row says why it is out of the ranking (``cap_em``:
        the activation gap its loss can reach, computed on the page)."""
        rows = []
        for v in self.verdicts.values():
            c = v.comparison
            if v.verdict == "pending":
                measured, why = "not stored yet: the run is in progress", "em-spread was added after the first stored run"
            elif c is None:
                measured, why = "not in this copy", "one of the two methods has no run"
            else:
                if v.key == "att_cost" and self.benchmark:
                    what = routing_cost.compared(self.benchmark)
                    measured = (f"{c['mean']:+.2f} ms [{c['low']:+.2f}, {c['high']:+.2f}], {p_text(c['p'])} "
                                f"({c['n']} paired rounds of the benchmark, {what})")
                else:
                    measured = interval_text(c, digits=2 if v.key == "att_cost" else 3)
                why = WHY[v.verdict] if c["low"] is not None else "one seed: no interval yet"
                if v.verdict == CANNOT_TELL and c["low"] is not None:
                    why = allows(v.row, digits=2 if v.key == "att_cost" else 3)
                if c.get("detectable") is not None:
                    why += f"; one seed's paired test detects {c['detectable']:.3f}"
                if v.key.startswith("spread") and (self.rising.get("em-spread") or 0) > RISING:
                    why += "; em-spread was still rising at the end: a verdict at this budget only"
            rows.append([v.claim, v.whose, f"{v.a} − {v.b}", measured, holm_text(v.row), v.verdict, why])
        em_state = "still rising at the end" if (self.rising.get("em") or 0) > RISING else "curve judged in the budget box"
        rows.insert(4, ["EM routing, small network (em)", "Hinton et al. 2018", "-", "no verdict: out of the ranking",
                        "-", "-", f"{self.params['dynamic'] / self.params['em']:.0f}× fewer parameters, margin loss with an "
                        f"activation cap of {cap_em:.3f}, {em_state}"])
        return noted_table(["claim", "whose", "difference", "ours: mean [95% interval], p", "Holm p", "verdict",
                            "why"], rows) + table_note([v.row for v in self.verdicts.values()],
                                                                   "on test digits: dynamic routing against uniform "
                                                                   "coupling, self-attention and EM on equal terms "
                                                                   "against dynamic routing")

    def glue_values(self, part: str) -> Dict[str, object]:
        """The numbers and words the prose pastes in, for the cell that shows ``part``: "budget", "cost",
        "ties" or "verdicts" (a copy without em-spread gets placeholders: nan, 0, "pending")."""
        if part == "budget":
            return {"ch10_detectable": self.detectable, "ch10_n_test": self.n_test, "ch10_n_train": self.n_train,
                    "ch10_epochs": self.epochs, "ch10_shift_px": self.shift_px, "ch10_budget_source": self.source}
        if part == "cost":
            ratios, n_in = self.equal_ratios(), routing_cost.input_capsules(self.benchmark)
            return {"ch10_cost_source": self.cost_source, "ch10_n_in_dyn": n_in.get("dynamic", 0),
                    "ch10_n_in_att": n_in.get("attention", 0),
                    "ch10_equal_low": min(ratios.values(), default=float("nan")),
                    "ch10_equal_high": max(ratios.values(), default=float("nan"))}
        if part == "ties":
            att = self._runs("attention")
            return {"ch10_att_final_ties": sum(r["test"] == r["affine"] for r in att), "ch10_att_seeds": len(att)}
        out = {}
        for key, v in self.verdicts.items():
            c = v.comparison
            out.update({f"ch10_{key}_verdict": v.verdict, f"ch10_{key}_words": WORDS[v.verdict],
                        f"ch10_{key}": c["mean"] if c else float("nan"),
                        f"ch10_{key}_ci": f"{c['low']:+.3f} to {c['high']:+.3f}" if c and c["low"] is not None
                        else "none"})
        sp, sa = (self.verdicts[k].comparison if self.has_spread else None for k in ("spread_test", "spread_affine"))
        g = self.rising.get("em-spread")
        out.update({
            "em_cost_ratio": self.cost_of("em") / self.cost_of("attention"),
            "ch10_att_cost_ratio": self.cost_of("dynamic") / self.cost_of("attention"),
            "ch10_spread_gap": -sp["mean"] if sp else float("nan"),
            "ch10_spread_affine_gap": -sa["mean"] if sa else float("nan"),
            "ch10_spread_params": self.params["em-spread"] if self.has_spread else 0,
            "ch10_spread_mcnemar": sum(m["p"] < 0.05 for m in sp["mcnemar"]) if sp else 0,
            "ch10_spread_mcnemar_n": len(sp["mcnemar"]) if sp else 0,
            "ch10_spread_state": "is not in this copy" if not self.has_spread else "had too few epochs to judge"
            if g is None else f"was still rising at the end ({g:+.3f} over its last three epochs)" if g > RISING
            else f"was flat at the end ({g:+.3f} over its last three epochs)",
            "ch10_source": self.source})
        return out


def _still_rising(runs: List[Dict]) -> Optional[float]:
    """Mean over seeds of (mean of the last 3 epochs' test accuracy) minus (mean of the 3 before)."""
    gains = [np.mean([e["test"] for e in r["epochs"][-3:]]) - np.mean([e["test"] for e in r["epochs"][-6:-3]])
             for r in runs if len(r["epochs"]) >= 6]
    return float(np.mean(gains)) if gains else None


def routing_report(preview: Dict, data) -> RoutingReport:
    """Read the stored comparison (the preview stands in when it is unreadable or lacks an original method)
    and the newest cost benchmark; ``data``: the dataset the preview used (reused when the sources match)."""
    stored, note = stored_or_preview(STORED, check=_check)
    missing = sorted(set(ORIGINAL) - {r["method"] for r in stored["runs"]}) if stored else []
    final = stored if stored is not None and not missing else preview
    s, by = final["settings"], {r["method"]: r for r in final["summary"]["table"]}
    if s["source"] != preview["settings"]["source"]:
        data = load_dataset("mnist", s["source"], verbose=False)
    n_test = s["n_test"] or len(data.x_test)
    _, affine = random_affine(data.x_test[:n_test].cpu(), float(s["affine_strength"]), 28,
                              torch.Generator().manual_seed(s["test_seed"]), return_params=True)
    rep = RoutingReport(
        preview=preview, stored=stored, note=note, missing=missing, final=final, benchmark=routing_cost.newest(),
        source="the stored run" if final is stored else "the live preview (not the stored run)",
        params={n: r["params"] for n, r in by.items()},
        rising={n: _still_rising([r for r in final["runs"] if r["method"] == n]) for n in by},
        n_train=s["n_train"] or len(data.x_train), n_test=n_test, epochs=s["epochs"], train_shift=s["shift"],
        shift_px=float(torch.hypot(affine["shift_x"], affine["shift_y"]).mean()),
        detectable=detectable_difference(n_test, float(np.clip(by["dynamic"]["test"], 0.01, 0.99))), verdicts={})
    rows = rows_for([{**c, "primary": c.get("primary", c["key"] in PRIMARY)} for c in CLAIMS], final["runs"],
                    n_test, key="method", correct=False)
    for row in rows:
        if row["key"] == "att_cost" and rep.benchmark:  # the benchmark's paired rounds, not the loaded timings
            row.update(comparison=(c := routing_cost.cost_comparison(rep.benchmark)), verdict=judge(c))
        if row["key"].startswith("spread") and not rep.has_spread:
            row["verdict"] = "pending"
    for row in adjust(rows):
        rep.verdicts[row["key"]] = Verdict(**{k: row[k] for k in ("key", "claim", "whose", "a", "b", "verdict",
                                                                   "comparison")}, row=row)
    paired = (rep.verdicts["routing_test"].comparison or {}).get("detectable")
    rep.detectable = paired or rep.detectable            # one seed's paired test where the misses are stored
    return rep
