"""The CapsNet computed in the rendered page: weight files for ``book/_static/capsnet.js`` and its panel.

The page downloads two files on request (``weight_files``; the book's Sphinx extension
``book/_ext/inpage_weights.py`` writes them): the decoder in float16 (an exact copy of the shipped
float16 weights) and the encoder, conv1 in float16, the primary convolution and the 1,152 x 10
matrices in int8 with one float32 scale per output channel or matrix (half float16's bytes;
``int8_error`` measures the cost). Layout: ``uint32`` header length, a JSON header (config; per
tensor shape, dtype, offset, and for int8 its scales' offset), then the tensors, 4-byte aligned.
``inpage_panel`` is the HTML a cell shows; in Jupyter and Colab it is a note only.
"""
from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from capsedu.core.squashing import safe_norm
from capsedu.figures.frames import capsnet_images, check_capsnet
from capsedu.figures.static import HtmlBlock, fill
from capsedu.runtime.device import one_thread

__all__ = ["weight_files", "write_weight_files", "read_weights", "int8_error", "inpage_panel", "InPagePanel",
           "describe_sizes", "DECODER_FILE", "ENCODER_FILE", "SCRIPT"]

DECODER_FILE, ENCODER_FILE = "capsnet-decoder.bin", "capsnet-encoder.bin"
SCRIPT = "capsnet.js"             # book/_static/capsnet.js, served from the book's _static folder
FORMAT = "capsedu-inpage-1"
# int8 tensors and how many leading axes share one scale: per output channel, per W_ij matrix.
INT8_GROUPS = {"primary.conv.weight": 1, "digits.weight": 2}
SLIDER_SPAN = 0.5                 # the sliders run over +-0.5 (the paper's grid: +-0.25)


def _quantize(w: torch.Tensor, axes: int):
    """Symmetric int8, one scale per group of the first ``axes`` axes: w ~ q * scale."""
    rows = w.float().reshape(math.prod(w.shape[:axes]), -1)
    scale = rows.abs().amax(dim=1).clamp(min=1e-12) / 127
    q = torch.round(rows / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.numpy().tobytes(), scale.numpy().astype("<f4").tobytes()


def _pack(tensors: Dict[str, torch.Tensor], config: Dict) -> bytes:
    """One file: header length, JSON header, then each tensor's bytes at a 4-byte boundary."""
    entries, chunks, offset = {}, [], 0

    def add(data: bytes) -> int:
        nonlocal offset
        start = offset
        padded = data + b"\0" * (-len(data) % 4)
        chunks.append(padded)
        offset += len(padded)
        return start

    for name, w in tensors.items():
        entry = {"shape": list(w.shape)}
        if name in INT8_GROUPS:
            q, scales = _quantize(w, INT8_GROUPS[name])
            entry.update(dtype="int8", offset=add(q), scale_axes=INT8_GROUPS[name], scale_offset=add(scales))
        else:
            entry.update(dtype="float16", offset=add(w.detach().cpu().half().numpy().astype("<f2").tobytes()))
        entries[name] = entry
    header = json.dumps({"format": FORMAT, "config": config, "tensors": entries}).encode()
    header += b" " * (-(4 + len(header)) % 4)                  # the data start 4-byte aligned
    return struct.pack("<I", len(header)) + header + b"".join(chunks)


def _config(model) -> Dict:
    c = model.config
    if c.routing not in ("hinton", "su"):
        raise ValueError(f"capsnet.js routes with Hinton's or Su's update, not {c.routing!r}")
    return {"routing": c.routing, "iterations": c.iterations, "squash_k": c.squash_k,
            "primary_types": c.primary_types, "primary_dim": c.primary_dim, "primary_stride": c.primary_stride,
            "num_classes": c.num_classes, "digit_dim": c.digit_dim, "image_size": list(c.image_size)}


def weight_files(model) -> Dict[str, bytes]:
    """{file name: bytes} of the decoder file and the encoder file for ``model`` (the paper's CapsNet)."""
    check_capsnet(model, "weight_files")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    decoder = {k: v for k, v in state.items() if k.startswith("decoder.")}
    encoder = {k: v for k, v in state.items() if not k.startswith("decoder.")}
    return {DECODER_FILE: _pack(decoder, _config(model)), ENCODER_FILE: _pack(encoder, _config(model))}


def write_weight_files(model, folder) -> Dict[str, int]:
    """Write ``weight_files(model)`` into ``folder``; returns {name: bytes}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, data in weight_files(model).items():
        (folder / name).write_bytes(data)
        sizes[name] = len(data)
    return sizes


def read_weights(data: bytes) -> Dict[str, torch.Tensor]:
    """A file of ``weight_files`` -> {name: float32 tensor}, dequantised as capsnet.js does."""
    (length,) = struct.unpack_from("<I", data, 0)
    header = json.loads(data[4:4 + length])
    if header.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file (format {header.get('format')!r})")
    base, out = 4 + length, {}
    for name, e in header["tensors"].items():
        n = math.prod(e["shape"])
        if e["dtype"] == "int8":
            q = np.frombuffer(data, np.int8, n, base + e["offset"]).astype(np.float32)
            groups = math.prod(e["shape"][:e["scale_axes"]])
            scale = np.frombuffer(data, "<f4", groups, base + e["scale_offset"])
            w = (q.reshape(groups, -1) * scale[:, None]).reshape(e["shape"])
        else:
            w = np.frombuffer(data, "<f2", n, base + e["offset"]).astype(np.float32).reshape(e["shape"])
        out[name] = torch.from_numpy(w.copy())
    return out


@torch.no_grad()
def int8_error(model, images: torch.Tensor) -> Dict:
    """The page's weights (int8 encoder, float16 decoder) against ``model`` on ``images`` (N, 1, 28, 28).

    Returns the largest difference of the 10 capsule lengths, the share of equal predictions,
    and the largest pixel difference of the reconstructions (out of 1).
    """
    images = capsnet_images(model, images, "int8_error")
    page = type(model)(model.config).eval()
    files = weight_files(model)
    page.load_state_dict({**read_weights(files[ENCODER_FILE]), **read_weights(files[DECODER_FILE])})
    with one_thread():
        ours = [m.cpu()(images.cpu()) for m in (model, page)]
        model.to(images.device)
    (_, len_a, rec_a), (_, len_b, rec_b) = ours
    return {"images": len(images), "max_length_error": float((len_a - len_b).abs().max()),
            "same_prediction": float((len_a.argmax(1) == len_b.argmax(1)).float().mean()),
            "max_pixel_error": float((rec_a - rec_b).abs().max())}


def _png_free(images: torch.Tensor) -> str:
    """(N, 28, 28) in [0, 1] -> base64 of N*784 uint8 grey values (row-major), for the page's JSON."""
    pixels = (images.clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()
    return base64.b64encode(pixels.tobytes()).decode("ascii")


@dataclass
class InPagePanel(HtmlBlock):   # nbytes: what the panel adds to its page; the weights come on request
    """The panel's data and its HTML; a notebook cell that evaluates one displays it."""
    data: Dict

    def html(self) -> str:
        payload = json.dumps(self.data).replace("</", "<\\/")
        # Sphinx puts the path to the book's root on <html data-content_root>: only the book has it.
        return fill("inpage.html", script=SCRIPT, data=payload, loader=fill("inpage-loader.js", script=SCRIPT))


@torch.no_grad()
def inpage_panel(model, digits: torch.Tensor, samples: torch.Tensor,
                 sample_labels: Optional[torch.Tensor] = None) -> InPagePanel:
    """The in-page panel for test ``digits`` (N, 1, 28, 28) (sliders) and ``samples`` (the canvas's samples);
    the sample buttons name each sample's label (``sample_labels``, if given) and the network's reading."""
    digits = capsnet_images(model, digits, "inpage_panel")
    samples = capsnet_images(model, samples, "inpage_panel")
    if sample_labels is not None and len(sample_labels) != len(samples):
        raise ValueError(f"inpage_panel: {len(samples)} samples but {len(sample_labels)} sample_labels")
    with one_thread():
        device = next(model.parameters()).device
        capsules = model.capsules(digits.to(device)).cpu()                                # (N, 10, 16)
        readings = safe_norm(model.capsules(samples.to(device)), dim=-1).argmax(dim=1).cpu()
    lengths = safe_norm(capsules, dim=-1)                                                 # (N, 10)
    labels = lengths.argmax(dim=1)
    # float32 values printed as the shortest decimals that read back to the same float32
    caps = [[float(np.float32(x)) for x in capsules[n, labels[n]].tolist()] for n in range(len(digits))]
    sizes = {name: len(data) for name, data in weight_files(model).items()}
    return InPagePanel({
        "digits": {"labels": labels.tolist(), "capsules": caps, "images": _png_free(digits[:, 0])},
        "samples": {"images": _png_free(samples[:, 0]), "predicted": readings.tolist(),
                    "labels": None if sample_labels is None else [int(y) for y in sample_labels]},
        "files": sizes, "decoder": DECODER_FILE, "encoder": ENCODER_FILE,
        "span": SLIDER_SPAN, "digit_dim": model.config.digit_dim, "num_classes": model.config.num_classes})


def describe_sizes(sizes: Dict[str, int]) -> str:
    """'capsnet-decoder.bin 2.81 MB, ...' for a cell's printout."""
    return ", ".join(f"{name} {n / 1e6:.2f} MB" for name, n in sizes.items())

