"""Records the text a chapter's figures draw, for test_figure_text.py (imported by the kernel).

``install(log_path)`` wraps ``Figure.draw`` and ``Text.draw``: every draw of a figure appends one
JSON line to ``log_path`` with the cell that drew it (IPython's execution count), the figure's
id, the size of the image drawn (the renderer's width in pixels: for a figure shown inline, the
cropped ``bbox_inches="tight"`` image) and its dots per inch, and each text drawn (its font size in
points and its first characters). Only texts that are drawn count: visible, not empty.
"""
import json

from matplotlib.figure import Figure
from matplotlib.text import Text

_passes = []  # the figure draws in progress (a figure may draw inside another's draw)
_original = {}  # the two draw methods before install


def install(log_path):
    """Wrap the two draw methods once; every figure draw from now on is logged."""
    uninstall()
    figure_draw, text_draw = _original["figure"], _original["text"] = Figure.draw, Text.draw

    def draw_figure(self, renderer):
        record = {"figure": id(self), "width_px": getattr(renderer, "width", None),
                  "dpi": getattr(renderer, "dpi", self.dpi), "texts": []}
        _passes.append(record)
        try:
            return figure_draw(self, renderer)
        finally:
            _passes.pop()
            record["cell"] = _execution_count()
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")

    def draw_text(self, renderer):
        if _passes and self.get_visible() and self.get_text().strip():
            _passes[-1]["texts"].append([self.get_fontsize(), self.get_text().strip()[:40]])
        return text_draw(self, renderer)

    Figure.draw, Text.draw = draw_figure, draw_text


def uninstall():
    """Put the two draw methods back (nothing is logged any more)."""
    if _original:
        Figure.draw, Text.draw = _original.pop("figure"), _original.pop("text")


def _execution_count():
    try:
        from IPython import get_ipython
        return get_ipython().execution_count
    except (ImportError, AttributeError):
        return None
