"""Su Jianlin's two-digit experiment (chapter 7): ``config`` (settings, presets, options), ``run``.

What the chapter and the claim ledger judge, as data (the wording is the chapter's):

- ``STORED``, ``CLAIMS``, ``frames(data)``: the rerun with per-item outcomes (``long-items``);
  ``pair_digits``, ``disjoint_pairs``: which test digits each pair holds, and the pairs that share
  none; ``judged_frames(data)``: the frames with the items the chapter judges (those pairs);
- ``VARIANTS_STORED``, ``VARIANTS``, ``VARIANTS_CLAIMS``, ``variants_frames()``: the settings
  investigation, one folder per changed setting, per-run accuracies only (seeds only).
"""
from __future__ import annotations

from typing import Dict, Mapping

from capsedu.experiments.shared import verdicts

__all__ = ["STORED", "DELTA", "CLAIMS", "frames", "judged_frames", "pair_digits", "disjoint_pairs",
           "VARIANTS_STORED", "VARIANTS", "VARIANTS_CLAIMS", "variants_frames"]

STORED = "two_digits_items"
DELTA = verdicts.DELTA["two digits"]   # "matches": the book's one rule (verdicts.margin)


def _claim(id, a, b, test, primary=False, **more) -> Dict:
    return {"id": id, "a": a, "b": b, "test": test, "primary": primary, **more}


# fixed on 2026-12-07 when chapter 7's table was rebuilt, while seeds 1-4 were still running
CLAIMS = [
    _claim("7.1", "capsule-su", "pooling", "vertical", primary=True),
    _claim("7.2", "capsule-su-march", "pooling", "vertical", primary=True),
    _claim("7.3", "capsule-hinton", "pooling", "vertical", primary=True),
    _claim("7.4", "capsule-su", "capsule-su-r1", "vertical", primary=True, kind="matches", delta=DELTA),
    _claim("7.5", "pooling-sum", "pooling", "vertical", primary=True),          # summing alone
    _claim("7.6", "capsule-su-r1", "capsule-mean", "vertical", primary=True),   # summed vs averaged votes
    _claim("7.7", "capsule-su-march", "capsule-su-r1", "vertical", kind="matches", delta=DELTA),
    _claim("7.8", "capsule-hinton", "capsule-su-r1", "vertical", kind="matches", delta=DELTA),
    _claim("7.9", "capsule-su-r1", "pooling", "vertical"),
    _claim("7.10", "capsule-su", "pooling", "horizontal"),
    _claim("7.11", "capsule-su-march", "pooling", "horizontal"),
    _claim("7.12", "capsule-su", "capsule-su-r1", "horizontal", kind="matches", delta=DELTA),
    _claim("7.13", "capsule-su", "pooling", "overlapping"),
    _claim("7.14", "capsule-su", "pooling", "single"),
    # the controls against the other side, added on 2026-12-07 after every seed was stored: with
    # 7.5 and 7.6 they say whether summing alone accounts for the capsule heads' lead
    _claim("7.15", "capsule-mean", "pooling", "vertical"),      # averaged votes vs averaged grid
    _claim("7.16", "capsule-su-r1", "pooling-sum", "vertical"),  # summed votes vs summed grid
]


def frames(data: Mapping) -> Dict:
    """The runs, epochs and items tables (``capsedu.experiments.shared.tables``) of a stored run or a
    live preview; the items: the single test digits and every layout's pairs."""
    from capsedu.experiments.shared import tables
    n_items = {"single": data["meta"]["n_test"], **dict.fromkeys(data["settings"]["layouts"],
                                                                 data["settings"]["n_pairs"])}
    return {"runs": tables.runs_table(data), "epochs": tables.epochs_table(data),
            "items": tables.items_table(data, n_items)}


def pair_digits(data: Mapping, y_test=None):
    """(first, second): the test digits of each pair of a stored run or live preview, drawn again
    from its settings as the run drew them (one pairing serves every layout). ``y_test``: the test
    labels the run used, else those of the data its header names."""
    import torch

    from capsedu.data.mnist import load_dataset
    from capsedu.data.pairs import distinct_pairs
    settings, (name, source) = data["settings"], data["meta"]["data"]
    if y_test is None:
        y_test = load_dataset(name, source=source, verbose=False).y_test
    labels = y_test[:data["meta"]["n_test"]].cpu()
    first, second, _ = distinct_pairs(labels[:, None, None, None].float(), labels, settings["n_pairs"],
                                      torch.Generator().manual_seed(settings["pair_seed"]))
    return first.tolist(), second.tolist()


def disjoint_pairs(first, second) -> list:
    """The indices, sorted, of a largest set of pairs (first[k], second[k]) in which no test digit
    appears twice: a maximum matching (networkx). The pairs reuse digits, so their outcomes are not
    independent; these are. The choice sees only which digits each pair holds, never an outcome."""
    import networkx as nx  # a dependency of torch
    graph = nx.Graph()
    graph.add_edges_from((int(a), int(b), {"pair": k}) for k, (a, b) in enumerate(zip(first, second)))
    return sorted(graph.edges[edge]["pair"] for edge in nx.max_weight_matching(graph, maxcardinality=True))


def judged_frames(data: Mapping, y_test=None) -> Dict:
    """``frames(data)`` with the items chapter 7 and the ledger judge: the single digits and each
    layout's pairs that share no test digit (``disjoint_pairs``); also "all_items" (every pair:
    context only), "pairs" (``pair_digits``) and "kept" (the indices of the judged pairs)."""
    f = frames(data)
    pairs = pair_digits(data, y_test)
    kept = disjoint_pairs(*pairs)
    items = f["items"]
    judged = items[(items.test == "single") | items.item.isin(kept)]
    return {**f, "items": judged, "all_items": items, "pairs": pairs, "kept": kept}


VARIANTS_STORED = "two_digits_variants"
# folder -> (the change, the model it was trained for); "preset" is what each change is set against
VARIANTS = {"preset": ("the investigation's budget", None),
            "twice_the_epochs_pooling": ("twice the epochs", "pooling"),
            "twice_the_epochs": ("twice the epochs", "capsule-su"),
            "lambda_0.5": ("λ = 0.5", "capsule-su"), "squash_k_1": ("squash k = 1", "capsule-su"),
            "torch_init": ("PyTorch initialisation", "capsule-su")}
# each change against the preset, seed by seed (a "model" of variants_frames is "<folder>/<model>")
VARIANTS_CLAIMS = [{"id": f"7.s{k * 3 + i + 1}", "a": f"{folder}/{model}", "b": f"preset/{model}",
                    "field": field, "change": change, "model": model}
                   for k, (folder, (change, model)) in enumerate(list(VARIANTS.items())[1:])
                   for i, field in enumerate(("single_acc", "vertical_top2", "horizontal_top2"))]


def variants_frames() -> Dict:
    """{"runs": every stored variant's runs, "model" renamed "<folder>/<model>" (the model kept in
    "head"), "missing": the line saying why, for each folder that cannot be used}."""
    import pandas as pd

    from capsedu.experiments.shared import tables
    from capsedu.runtime import results
    parts, missing = [], []
    for folder in VARIANTS:
        data, why = results.stored_or_preview(f"{VARIANTS_STORED}/{folder}")
        if data is None:
            missing.append(why.split("; showing")[0])     # no live stand-in here
            continue
        runs = tables.runs_table({**data, "origin": f"stored run results/{VARIANTS_STORED}/{folder}"})
        parts.append(runs.assign(head=runs.model, variant=folder, model=folder + "/" + runs.model))
    return {"runs": pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(), "missing": missing}
