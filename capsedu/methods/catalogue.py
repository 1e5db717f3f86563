"""Every routing method chapter 10 compares, declared once: what it is, its name in figures, its
colour and the loss it trains with. The comparison (``capsedu.experiments.compare_routing``), the
figures and the benchmark take the names from here."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Method", "ROUTING_METHODS", "METHODS", "LOSS", "COLOURS"]


class Method(NamedTuple):
    about: str            # one line: the method and its source
    label: str            # its name in a figure
    colour: str           # matplotlib's colour for it in every figure
    loss: str = "margin"  # fit's loss


ROUTING_METHODS = {
    "dynamic": Method("3 iterations (Sabour et al. 2017)", "dynamic routing", "tab:blue"),
    "none": Method("uniform coupling, one step (control)", "no routing", "tab:gray"),
    "em": Method("matrix capsules (Hinton et al. 2018)", "EM routing", "tab:green"),
    "attention": Method("Efficient-CapsNet (Mazzia et al. 2021)", "self-attention", "tab:red"),
    # EM's fair control: dynamic's conv trunk and size, the spread loss, lambda 15
    "em-spread": Method("EM on dynamic's trunk, spread loss", "EM-spread", "tab:olive", "spread"),
}
METHODS = {name: m.about for name, m in ROUTING_METHODS.items()}
LOSS = {name: m.loss for name, m in ROUTING_METHODS.items() if m.loss != "margin"}  # not the margin loss
COLOURS = {name: m.colour for name, m in ROUTING_METHODS.items()}
