"""Copy the JS the book serves locally from web/node_modules into book/_vendor.

Sphinx publishes book/_vendor under _static/ (html_static_path in _config.yml),
so MathJax and the ipywidgets renderer load without a CDN. Run after
`npm ci --prefix web`; it replaces book/_vendor each time.
"""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "web" / "node_modules"
DEST = ROOT / "book" / "_vendor"

# (source under node_modules, destination under book/_vendor, glob or None for a file)
ASSETS = [
    ("mathjax/es5/tex-chtml.js", "mathjax/tex-chtml.js", None),
    # CHTML fonts, and the TeX extensions MathJax's autoload fetches on demand (\boldsymbol, \cancel, ...)
    ("mathjax/es5/output/chtml/fonts/woff-v2", "mathjax/output/chtml/fonts/woff-v2", "*.woff"),
    ("mathjax/es5/input/tex/extensions", "mathjax/input/tex/extensions", "*.js"),
    ("requirejs/require.js", "require.js", None),
    # The ipywidgets renderer (base and controls bundled). It fetches its Font Awesome
    # files relative to the page, not to itself, so copying them would not help.
    ("@jupyter-widgets/html-manager/dist/embed-amd.js", "html-manager/embed-amd.js", None),
]


def main() -> int:
    if not NODE.is_dir():
        sys.exit(f"{NODE} is missing: run `npm ci --prefix web` first")
    shutil.rmtree(DEST, ignore_errors=True)
    for src, dst, pattern in ASSETS:
        src, dst = NODE / src, DEST / dst
        files = [(src, dst)] if pattern is None else [(f, dst / f.name) for f in sorted(src.glob(pattern))]
        if not files or not all(f.is_file() for f, _ in files):
            sys.exit(f"missing from web/node_modules: {src} ({pattern or 'file'})")
        for f, target in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    copied = [p for p in DEST.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in copied)
    print(f"vendored {len(copied)} files ({size / 1e6:.1f} MB) into {DEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
