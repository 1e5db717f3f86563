"""The core is the page: chapters 2-5 print the package's own definitions (inspect.getsource at build
time, so the listing is the package's code) and re-implement none of them; chapter 4 ends with the
whole network on one screen (its WHOLE_MODEL listing)."""
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


WHOLE_MODEL_CHAPTER = "04_architecture"
WHOLE_MODEL_LINES = 250  # one sitting: the paper's network, its routing and losses, and nothing else


def whole_model(chapter):
    """The names in the chapter's ``WHOLE_MODEL = (...)`` tuple, and whether its cell prints each
    with inspect.getsource; ([], False) where the chapter has none."""
    for src in code_cells(chapter):
        for node in ast.walk(ast.parse("\n".join(line for line in src.splitlines() if not line.startswith("%")))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WHOLE_MODEL" for t in node.targets):
                names = [ast.unparse(e) for e in node.value.elts]
                return names, bool(re.search(r"inspect\.getsource\(\w+\) for \w+ in WHOLE_MODEL", src))
    return [], False


@pytest.mark.parametrize("name, chapter", PRINTED.items())
def test_each_definition_is_printed_from_the_package_short_and_guarded_once(name, chapter):
    """... and each of its functions (each method of a class) is at most 25 lines and raises at most once:
    argument checks live where a user enters (capsedu.core.checks), not in the maths."""
    import inspect
    import textwrap

    import capsedu.core as core
    obj = core
    for part in name.split("."):
        obj = getattr(obj, part)                                   # the name is the package's
    names, printed = whole_model(chapter)
    assert any(re.search(rf"inspect\.getsource\({re.escape(name)}\)", src) for src in code_cells(chapter)) \
        or (printed and name in names), f"{chapter} does not print inspect.getsource({name})"
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert functions
    for fn in functions:
        assert fn.end_lineno - fn.lineno + 1 <= 25, fn.name
        assert sum(isinstance(n, ast.Raise) for n in ast.walk(fn)) <= 1, fn.name


def test_chapter_4_shows_the_whole_network_on_one_screen():
    """Every capsedu.core class in the paper's CapsNet (and its bases), its squash, length, routing
    and both losses are printed from the package in one listing of at most WHOLE_MODEL_LINES."""
    import inspect

    import capsedu.core as core
    from capsedu.core.capsnet import CapsNet
    names, printed = whole_model(WHOLE_MODEL_CHAPTER)
    assert printed, f"{WHOLE_MODEL_CHAPTER} has no WHOLE_MODEL listing printed with inspect.getsource"
    objects = [getattr(core, name) for name in names]              # each is the package's own
    in_core = {cls for module in CapsNet().modules() for cls in type(module).__mro__
               if cls.__module__.startswith("capsedu.core")}
    missing = {c.__name__ for c in in_core} | {"squash", "safe_norm", "dynamic_routing", "margin_loss",
                                                "reconstruction_loss"}
    missing -= set(names)
    assert not missing, f"the whole-model screen leaves out {sorted(missing)}"
    lines = sum(len(inspect.getsource(obj).splitlines()) for obj in objects)
    assert lines <= WHOLE_MODEL_LINES, f"the whole-model screen has grown to {lines} lines"


def test_no_chapter_re_implements_a_core_definition():
    for path in sorted(BOOK.glob("*.ipynb")):
        chapter = path.stem
        for src in code_cells(chapter):
            lines = [line for line in src.splitlines() if not line.lstrip().startswith(("%", "!"))]
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and LOOKS_LIKE_THE_CORE.search(node.name):
                    assert (chapter, node.name) in ALLOWED or (chapter, "*") in ALLOWED, \
                        f"{chapter} defines {node.name}: print the package's definition instead"


def test_the_whole_model_screen_runs_as_the_package_does():
    """The screen (model_lines of each WHOLE_MODEL definition), executed on its own, is a CapsNet
    whose capsules, lengths, reconstructions and losses equal the package's on the same weights:
    what it leaves out (checks, the fast path's hook, the dtype guard) changes nothing here."""
    import inspect

    import torch

    import capsedu.core as core
    from capsedu.core import capsnet, layers, losses, routing, squashing
    from capsedu.figures.listing import model_lines
    names, _ = whole_model(WHOLE_MODEL_CHAPTER)
    listing = "\n".join(model_lines(inspect.getsource(getattr(core, n))) for n in names)
    assert "fast_routing" not in listing and "autocast" not in listing
    for obj in (layers.RoutedCapsules, capsnet.CapsNet):   # left out by its marker, kept in the file
        assert "# engineering" in inspect.getsource(obj)
    namespace = {k: v for m in (squashing, routing, layers, capsnet, losses) for k, v in vars(m).items()}
    exec(compile(listing, "<whole-model screen>", "exec"), namespace)
    assert namespace["CapsNet"] is not capsnet.CapsNet       # the screen's own definitions
    torch.manual_seed(0)
    package = capsnet.CapsNet().eval()
    screen = namespace["CapsNet"]().eval()
    screen.load_state_dict(package.state_dict())
    x, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 7, 3])
    with torch.no_grad():
        theirs, ours = package(x, labels), screen(x, labels)
        for a, b in zip(theirs, ours):
            torch.testing.assert_close(a, b)
        for loss in ("margin_loss", "reconstruction_loss"):
            args = (theirs[1], labels) if loss == "margin_loss" else (theirs[2], x)
            torch.testing.assert_close(namespace[loss](*args), getattr(losses, loss)(*args))
