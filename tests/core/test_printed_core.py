"""The core is the page: chapters 2-5 print the package's own definitions (inspect.getsource at build
time, so the listing is the package's code) and re-implement none of them."""
import ast
import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"

# definition -> the chapter that prints it and explains it in the text around the listing
PRINTED = {"squash": "02_capsule", "safe_norm": "02_capsule", "dynamic_routing": "03_routing",
           "PrimaryCapsules": "04_architecture", "RoutedCapsules": "04_architecture", "DenseCapsules": "04_architecture", "Decoder": "04_architecture",
           "margin_loss": "05_training", "reconstruction_loss": "05_training", "CapsNet.capsules": "05_training",
           "CapsNet.forward": "05_training"}
# Worked computations that share a name with a definition on purpose: they are not copies of the package.
ALLOWED = {("03_routing", "route_by_hand"): "one example, every intermediate value, Procedure 1 by hand",
           ("11_tutorial_code", "*"): "the tutorial's own code, re-created to show its errors"}
LOOKS_LIKE_THE_CORE = re.compile(r"squash|safe_norm|dynamic_routing|^route|digitcaps|primarycaps|decoder|"
                                 r"margin_loss|reconstruction_loss", re.I)


def code_cells(chapter):
    cells = json.loads((BOOK / f"{chapter}.ipynb").read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("name, chapter", PRINTED.items())
def test_each_definition_is_printed_from_the_package(name, chapter):
    import capsedu.core as core
    obj = core
    for part in name.split("."):
        obj = getattr(obj, part)                                   # the name is the package's
    assert any(re.search(rf"inspect\.getsource\({re.escape(name)}\)", src) for src in code_cells(chapter)), \
        f"{chapter} does not print inspect.getsource({name})"


def test_no_chapter_re_implements_a_core_definition():
    for path in sorted(BOOK.glob("*.ipynb")):
        chapter = path.stem
        for src in code_cells(chapter):
            lines = [line for line in src.splitlines() if not line.lstrip().startswith(("%", "!"))]
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and LOOKS_LIKE_THE_CORE.search(node.name):
                    assert (chapter, node.name) in ALLOWED or (chapter, "*") in ALLOWED, \
                        f"{chapter} defines {node.name}: print the package's definition instead"
