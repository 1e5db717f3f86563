"""Parameter counts, read off a model and derived by formula (chapter 4's table).

``parameter_table(model)`` lists every layer that owns parameters with the count
read from its tensors and the count derived from its hyperparameters alone
(kernel sizes, channels, capsule numbers), so the book can show the two agree.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from torch import nn

from capsedu.core.layers import DenseCapsules, PrimaryCapsules, SharedCapsules

__all__ = ["formula", "parameter_table", "format_table"]


def _conv_formula(conv: nn.Conv2d) -> Tuple[str, int]:
    kh, kw = conv.kernel_size
    cin, cout = conv.in_channels // conv.groups, conv.out_channels
    bias = cout if conv.bias is not None else 0
    return f"{kh}x{kw}x{cin}x{cout} + {bias}", kh * kw * cin * cout + bias


def formula(module: nn.Module) -> Optional[Tuple[str, int]]:
    """(text, value) of the parameter count from hyperparameters, or None for unknown layer types."""
    if isinstance(module, nn.Conv2d):
        return _conv_formula(module)
    if isinstance(module, nn.Linear):
        bias = module.out_features if module.bias is not None else 0
        return f"{module.in_features}x{module.out_features} + {bias}", module.in_features * module.out_features + bias
    if isinstance(module, (DenseCapsules, SharedCapsules)):  # one matrix per (input, output) pair, or per output
        *pairs, out_dim, in_dim = module.weight.shape
        return "x".join(map(str, pairs)) + f"x({out_dim}x{in_dim})", math.prod(module.weight.shape)
    return None


def parameter_table(model: nn.Module) -> List[Dict]:
    """One row per parameter-owning layer: name, type, shapes, counted, formula, derived, agree."""
    rows = []
    for name, module in model.named_modules():
        if isinstance(module, PrimaryCapsules):
            continue  # its single conv is listed on its own row
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        counted = sum(p.numel() for p in own)
        f = formula(module)
        rows.append({
            "layer": name,
            "type": type(module).__name__,
            "shapes": [tuple(p.shape) for p in own],
            "counted": counted,
            "formula": f[0] if f else "",
            "derived": f[1] if f else None,
            "agree": f is not None and f[1] == counted,
        })
    return rows


def format_table(rows: List[Dict]) -> str:
    """Plain-text table of ``parameter_table`` rows, with a total line."""
    head = f"{'layer':<15}{'shapes':<20}{'counted':>11}  {'formula':<25}{'derived':>11}"   # 82 wide
    lines = [head, "-" * len(head)]
    for r in rows:
        shapes = ", ".join("x".join(map(str, s)) for s in r["shapes"])
        derived = f"{r['derived']:,}" if r["derived"] is not None else "-"
        lines.append(f"{r['layer']:<15}{shapes:<20}{r['counted']:>11,}  {r['formula']:<25}{derived:>11}")
    total = sum(r["counted"] for r in rows)
    total_derived = sum(r["derived"] or 0 for r in rows)
    lines += ["-" * len(head), f"{'total':<35}{total:>11,}  {'':<25}{total_derived:>11,}"]
    return "\n".join(lines)
