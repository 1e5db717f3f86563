"""The Colab-ready copies (scripts/colab_copies.py): no MyST left, and cell by cell the sources."""
import json
import re
from pathlib import Path

import nbformat
import pytest
from cli_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "_build" / "jupyter_execute" / "book"
MYST = re.compile(r"\{glue|\{cite|\{doc|^\s*(`{3,}|:{3,})\{", re.M)


copies = load_script("scripts/colab_copies.py")
BIB = copies.Bibliography(ROOT / "book" / "references.bib")


@pytest.fixture(scope="module", params=["unbuilt", "built"])
def written(request, tmp_path_factory):
    """The copies of every chapter: without a build (pointers), and from the build when there is one."""
    if request.param == "built" and not BUILT.is_dir():
        pytest.skip("no book build here (_build/jupyter_execute): .ci/run builds it before the tests")
    out = tmp_path_factory.mktemp(request.param)
    return request.param, copies.write_copies(out, BUILT if request.param == "built" else None)


def test_every_chapter_has_a_copy_without_myst(written):
    kind, paths = written
    pages = sorted((ROOT / "book").glob("*.ipynb"))            # the 12 chapters and the pages after them
    assert [p.name for p in paths] == [p.name for p in pages] and len(paths) > 12
    for path in paths:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert not MYST.search(cell.source), f"{path.name} {cell.id}: {MYST.search(cell.source).group(0)}"
                assert 'class="html-only"' not in cell.source
                assert kind == "unbuilt" or "computed by code cell" not in cell.source, \
                    f"{path.name} {cell.id}: a glued value the build made was not read"


def test_the_copies_are_the_sources_cell_by_cell(written):
    _, paths = written
    for path in paths:
        source = nbformat.read(ROOT / "book" / path.name, as_version=4)
        copy = nbformat.read(path, as_version=4)
        nbformat.validate(copy)
        assert [c.id for c in copy.cells if c.id != "colab-references"] == [c.id for c in source.cells]
        for a, b in zip(source.cells, copy.cells):
            assert a.cell_type == b.cell_type and a.metadata == b.metadata
            if a.cell_type == "code":
                assert a.source == b.source, f"{path.name} {a.id}: code differs from the source"
        cites = "{cite}" in "".join(c.source for c in source.cells if c.cell_type == "markdown")
        assert (copy.cells[-1].id == "colab-references") == cites
        assert copy.cells[-1].id != "colab-references" or copy.cells[-1].source.startswith("## References")


def test_citations_as_author_year_and_the_reference_list():
    assert BIB.cite("sabour2017dynamic") == "(Sabour et al., 2017)"
    assert BIB.cite("su2018capsule") == "(Su, 2018)"
    assert BIB.cite("pechyonkin2017understanding,hinton2011transforming").startswith("(Pechyonkin, 2017; Hinton et al.")
    assert BIB.label("higgsfield2017tutorial").startswith("higgsfield, ")           # a braced name stays whole
    assert "Léon Bottou" in BIB.reference("lecun1998gradient")                     # {\'e} composed
    assert "https://doi.org/10.1109/5.726791" in BIB.reference("lecun1998gradient")
    with pytest.raises(KeyError, match="nobody2020"):
        BIB.cite("nobody2020")


def test_directives_become_details_or_quotes_and_html_only_text_goes_and_glue_is_escaped():
    assert copies.escape_markdown("2*3_x") == r"2\*3\_x"       # glued text: myst-nb's format_plain_text, escaped
    text = "Try:\n\n````{admonition} Solution 1\n:class: dropdown\nUse\n```python\nx = 1\n```\n````\nafter"
    out = copies.directives_to_markdown(text)
    assert out.split("\n")[2:5] == ["<details>", "<summary>Solution 1</summary>", ""]
    assert "```python\nx = 1\n```" in out and out.endswith("</details>\nafter")
    assert copies.directives_to_markdown("```{note}\nSee\nthis\n```") == "> **Note**\n>\n> See\n> this"
    with pytest.raises(ValueError, match="never closed"):
        copies.directives_to_markdown("```{note}\nopen")
    html = 'A widget. <span class="html-only">This page runs no kernel.</span> Next.'
    assert copies.convert(html, BIB, str, lambda k, s: k) == "A widget. Next."
    assert copies.convert("{doc}`the appendix <11_tutorial_code>`", BIB, copies.doc_link, None) == \
        f"[the appendix]({copies.pages_url()}book/11_tutorial_code.html)"


def test_pointers_name_the_cell_that_glues_a_value_when_nothing_was_built():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell('for k in ("a", "b"):\n    glue(f"slope_{k}", 1, display=False)')])
    cells = copies.glue_cells(nb)
    assert copies.glue_cell(cells, "slope_a") == 2 and copies.glue_cell(cells, "other") is None


def test_the_build_glue_store_is_read(tmp_path):
    executed = tmp_path / "07_x.ipynb"
    (tmp_path / "07_x.glue.json").write_text(json.dumps({"acc": {"data": {"text/plain": "0.5"}}}))
    assert copies.glued_values(executed) == {"acc": "0.5"}
    assert copies.glued_values(tmp_path / "08_y.ipynb") == copies.glued_values(None) == {}


def test_the_colab_buttons_open_the_branch_the_workflow_writes():
    config = (ROOT / "_config.yml").read_text()
    branch = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+branch:\s*(\S+)", config, re.M).group(1)
    workflow = (ROOT / ".github" / "workflows" / "book.yml").read_text()
    assert "scripts/colab_copies.py --built _build/jupyter_execute/book --out _build/colab/book" in workflow
    assert f"git init -q -b {branch}" in workflow and f'.git" {branch}' in workflow, branch
