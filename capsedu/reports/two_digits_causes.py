"""Chapter 7's search for causes: top-2 accuracy against the ink gap between the two digits (``ink_gaps``),
and which settings of Su's protocol move the numbers (``settings_report``: each stored variant of
``results/two_digits_variants/`` against the preset, seed by seed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple

import torch

from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.experiments.two_digits.run import two_digit_test_set
from capsedu.figures.tables import render_table
from capsedu.reports.two_digits import PREVIEW, TwoDigitReport
from capsedu.reports.verdicts import CANNOT_TELL, adjust, holm_text, interval_text, rows_for, table_note
from capsedu.training.evaluation import predict_lengths, set_hits

__all__ = ["ink_gap", "InkGaps", "ink_gaps", "VARIANTS", "Change", "Settings", "settings_report"]

GAP_BINS = ((0, 7), (7, 10), (10, 14), (14, 99))   # ink gaps in px; under 14 px some cells see both digits


def ink_gap(images: torch.Tensor, layout: str) -> torch.Tensor:
    """Pixels between the two digits' ink along the axis that joins them, (N,), for (N, 1, 56, 28)
    vertical or (N, 1, 28, 56) horizontal pairs."""
    ink = (images[:, 0] > 0.3).any(dim=2 if layout == "vertical" else 1)  # (N, 56): ink per row / column
    idx = torch.arange(ink.shape[1], device=ink.device)
    last_of_first = torch.where(ink[:, :28], idx[:28], torch.full_like(idx[:28], -1)).amax(dim=1)
    first_of_second = torch.where(ink[:, 28:], idx[28:], torch.full_like(idx[28:], 99)).amin(dim=1)
    return (first_of_second - last_of_first - 1).float()


@dataclass
class InkGaps:
    """Each test pair's ink gap, and whether each network's top-2 set was right (1.0), by layout."""
    gaps: Dict[str, torch.Tensor]                 # layout -> (N,)
    hits: Dict[str, Dict[str, torch.Tensor]]      # layout -> model -> (N,)

    def lines(self) -> List[str]:
        return [f"{layout:10} median ink gap {gap.median().item():.0f} px; under 14 px "
                f"(cells that see both digits): {(gap < 14).float().mean().item():.0%} of pairs"
                for layout, gap in self.gaps.items()]

    def table(self) -> str:
        """HTML: top-2 accuracy per layout and gap bin."""
        rows = [[layout, f"{lo}-{hi - 1 if hi < 99 else 'more'}", int(sel.sum()),
                 *(f"{h[sel].mean().item():.2f}" for h in self.hits[layout].values())]
                for layout, gap in self.gaps.items() for lo, hi in GAP_BINS
                for sel in [(gap >= lo) & (gap < hi)] if sel.any()]
        return render_table(["layout", "ink gap (px)", "pairs", *(f"{n} top-2" for n in self.hits["vertical"])],
                            rows, html=True)

    def hit_rate(self, layout: str, model: str, lo: int, hi: int) -> float:
        """Top-2 accuracy of ``model`` on the ``layout`` pairs of the bins that start in [lo, hi): the bins'
        accuracies as the table rounds them, weighted by their pairs (the chapter's printed numbers)."""
        gap, hits = self.gaps[layout], self.hits[layout][model]
        bins = [(round(hits[sel].mean().item(), 2), int(sel.sum())) for b, e in GAP_BINS if lo <= b < hi
                for sel in [(gap >= b) & (gap < e)] if sel.any()]
        return sum(a * n for a, n in bins) / sum(n for _, n in bins) if bins else float("nan")

    def summary(self) -> str:
        """Markdown: narrow gaps in both layouts against wide horizontal ones, per network."""
        return "**Top-2 accuracy by ink gap (live preview, first seed):**\n\n" + "\n".join(
            f"- {name}: gap under 10 px, vertical {self.hit_rate('vertical', name, 0, 10):.2f} and horizontal "
            f"{self.hit_rate('horizontal', name, 0, 10):.2f}; horizontal pairs with a gap of 10 px or more "
            f"{self.hit_rate('horizontal', name, 10, 99):.2f}." for name in self.hits["vertical"])


def ink_gaps(live: TwoDigitReport, x_test: torch.Tensor, y_test: torch.Tensor) -> InkGaps:
    """The live preview's first-seed networks on its own vertical and horizontal test pairs."""
    config, gaps, hits = live.result["settings"], {}, {}
    for layout in ("vertical", "horizontal"):
        images, targets = two_digit_test_set(x_test[:live.n_test], y_test[:live.n_test], config["n_pairs"], layout,
                                             seed=config["pair_seed"])
        gaps[layout] = ink_gap(images, layout)
        hits[layout] = {name: set_hits(predict_lengths(net, images), targets).float()
                        for name, net in live.networks().items()}
    return InkGaps(gaps, hits)


VARIANTS = {"preset": "the investigation's budget", "twice_the_epochs_pooling": "twice the epochs",
            "twice_the_epochs": "twice the epochs", "lambda_0.5": "λ = 0.5",
            "squash_k_1": "squash k = 1", "torch_init": "PyTorch initialisation"}
FIELDS = (("single_acc", "single digit"), ("vertical_top2", "vertical top-2"), ("horizontal_top2", "horizontal top-2"))


class Change(NamedTuple):
    """One measure of one model under one change of setting, against the preset seed by seed."""
    change: str
    model: str
    measure: str
    interval: str                    # "mean [95% interval], p (seeds)"
    matters: bool                    # the interval excludes zero and the Holm-adjusted p is below 0.05
    mean: float                      # the paired mean difference, change minus preset
    holm: str = "-"                  # the Holm-adjusted p over all the table's comparisons


@dataclass
class Settings:
    """The stored variants: ``notes`` on those not used, summary ``rows``, and each ``Change``."""
    notes: List[str]
    rows: List[List] = field(default_factory=list)
    changes: List[Change] = field(default_factory=list)
    verdict_rows: List[Dict] = field(default_factory=list)   # the comparisons' verdict rows, Holm-adjusted together

    def table(self) -> str:
        return render_table(["change", "model", "seeds", *(n for _, n in FIELDS)], self.rows, html=True)

    def comparisons(self) -> str:
        return render_table(["change", "model", "measure", "change − preset: mean [95% interval], p", "Holm p",
                             "verdict"], [[*c[:4], c.holm, "matters" if c.matters else "cannot tell"]
                                          for c in self.changes], html=True) + table_note(self.verdict_rows)

    def matter(self, change: str = None) -> List[Change]:
        """The comparisons whose interval excludes zero after Holm's correction (of one change, or of all)."""
        return [c for c in self.changes if c.matters and change in (None, c.change)]

    def names(self) -> List[str]:
        return list(dict.fromkeys(c.change for c in self.changes))

    def quiet(self) -> List[str]:
        """The changes none of whose comparisons matters."""
        return [name for name in self.names() if not self.matter(name)]

    @staticmethod
    def listed(changes: List[Change]) -> str:
        """E.g. "pooling: single digit +0.013; capsule-su: vertical top-2 +0.121"."""
        by_model: Dict[str, List[str]] = {}
        for c in changes:
            by_model.setdefault(c.model, []).append(f"{c.measure} {c.mean:+.3f}")
        return "; ".join(f"{model}: {', '.join(parts)}" for model, parts in by_model.items())

    def lines(self) -> List[str]:
        return [f"{name:24} {self.listed(self.matter(name)) or 'nothing survives Holm'}" for name in self.names()]

    def glued(self, hurt=("squash k = 1", "PyTorch initialisation")) -> Dict[str, object]:
        """What the prose quotes: the counts, the gains of more epochs, the quiet changes, where ``hurt`` matter."""
        return {"variants_n": len(self.changes), "variants_matter_n": len(self.matter()),
                "variants_epochs": self.listed(self.matter("twice the epochs")),
                "variants_quiet": ", ".join(self.quiet()) or "none",
                "variants_hurt": "; ".join(f"{h}, {self.listed(self.matter(h))}" for h in hurt if self.matter(h))}


def settings_report(folder: str = "two_digits_variants") -> Settings:
    """Each stored variant of ``VARIANTS``, its runs paired by seed with the preset's runs of the same model."""
    found, notes = {}, []
    for key in VARIANTS:
        found[key], note = stored_or_preview(f"{folder}/{key}", check=lambda d: d["meta"]["n_test"])
        notes += [note.replace(f"; {PREVIEW}", "")] if note else []
    out, base = Settings(notes), found["preset"]
    for key, label in VARIANTS.items():
        for row in found[key]["summary"] if found[key] else ():
            out.rows.append([label, row["model"], row["seeds"],
                             *(f"{row[f]:.3f} ± {row[f + '_std'] or 0:.3f}" for f, _ in FIELDS)])
            mine = [{**r, "model": "variant"} for r in found[key]["runs"] if r["model"] == row["model"]]
            preset = [{**r, "model": "preset"} for r in (base["runs"] if base else ()) if r["model"] == row["model"]]
            if key == "preset" or not preset:
                continue
            for f, name in FIELDS:
                n = found[key]["meta"]["n_test"] if f == "single_acc" else found[key]["settings"]["n_pairs"]
                (v,) = rows_for([dict(a="variant", b="preset", field=f, n=n)], mine + preset, n, correct=False)
                if v["comparison"] is not None:
                    out.verdict_rows.append({**v, "change": (label, row["model"], name)})
    for v in adjust(out.verdict_rows):      # one family: every change, model and measure of the table
        out.changes.append(Change(*v["change"], interval_text(v["comparison"]), v["verdict"] != CANNOT_TELL,
                                  v["comparison"]["mean"], holm_text(v)))
    return out
