"""Sphinx extension: the weight files of the in-page CapsNet (book/appendix_inpage), written at build time.

``book/_static/capsnet.js`` (copied by ``html_static_path`` in _config.yml) computes the
shipped CapsNet in the page; the weights it downloads on request are made here from the
package's pretrained weights (``capsedu.figures.inpage.write_weight_files``: a few seconds),
into the built book's ``_static``, so they are never committed and always match the package.

Listed in _config.yml (``sphinx.local_extensions`` puts this folder on sys.path).
"""
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def write_weights(app, exception):
    """After a successful HTML build, write the decoder and encoder files beside capsnet.js."""
    if exception is not None or app.builder.format != "html":
        return
    from capsedu.figures.inpage import describe_sizes, write_weight_files
    from capsedu.training.pretrained import load_capsnet

    sizes = write_weight_files(load_capsnet("cpu"), Path(app.outdir) / "_static")
    LOGGER.info(f"inpage_weights: wrote {describe_sizes(sizes)} into _static")


def setup(app):
    app.connect("build-finished", write_weights)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
