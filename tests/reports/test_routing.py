"""Chapter 10's reader (``capsedu.reports.routing``) on the stored comparison, on a partial copy of it and
on a damaged one: the numbers the chapter prints, and the fallback to the live preview, labelled."""
import shutil

import pytest

import capsedu.runtime.results
from capsedu.data.mnist import load_dataset
from capsedu.experiments.compare_routing.run import PRESETS, summarise
from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.reports.routing import routing_report
from capsedu.reports.verdicts import CANNOT_TELL, FAILS, HOLDS

REAL = capsedu.runtime.results.results_dir() / "compare_routing"
LIVE = "the live preview (not the stored run)"


@pytest.fixture(scope="module")
def data():
    return load_dataset("mnist", "sample", verbose=False)


@pytest.fixture(scope="module")
def stand_in():
    """A live preview without training: seed 0 of the four original methods, summarised as a live run is."""
    stored, _ = stored_or_preview("compare_routing")
    runs = [r for r in stored["runs"] if r["seed"] == 0 and r["method"] != "em-spread"]
    return {**stored, "runs": runs, "summary": summarise(runs, PRESETS["long"])}


def copy_of(tmp_path, monkeypatch, leave_out=()):
    """results/compare_routing copied into tmp_path without the run files ``leave_out``; the reader reads it."""
    folder = tmp_path / "compare_routing"
    shutil.copytree(REAL, folder, ignore=lambda _, names: [n for n in names if n in leave_out])
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    return folder


def test_the_stored_run_gives_the_chapters_numbers(data, stand_in):
    rep = routing_report(stand_in, data)
    assert rep.from_stored and rep.source == "the stored run" and rep.has_spread
    assert "15 of 15 trainings finished" in rep.stored_text()
    assert (rep.n_train, rep.n_test, rep.epochs) == (9000, 1000, 15)
    # one seed's paired test on the shared digits, dynamic − none (two independent sets would need 0.0151)
    assert rep.detectable == pytest.approx(0.0092918, abs=1e-6) and rep.shift_px == pytest.approx(1.58158, abs=1e-4)
    assert {n: round(g, 3) for n, g in rep.rising.items()} == {"dynamic": 0.001, "none": 0.003, "em": 0.016,
                                                                "attention": 0.002, "em-spread": 0.007}
    assert {k: v.verdict for k, v in rep.verdicts.items()} == {
        "routing_test": CANNOT_TELL, "routing_affine": CANNOT_TELL, "att_test": CANNOT_TELL, "att_cost": HOLDS,
        "spread_test": FAILS, "spread_affine": CANNOT_TELL}        # the affine row: Holm-adjusted p 0.052
    assert rep.verdicts["spread_affine"].row["p_holm"] == pytest.approx(0.0516, abs=1e-4)
    glued = rep.glue_values("verdicts")
    # the benchmark's paired rounds of both routings on one u_hat of attention's 16 input capsules
    assert glued["ch10_att_cost"] == pytest.approx(1.49388, abs=1e-4)
    assert rep.equal_ratios() == pytest.approx({16: 2.37887, 64: 1.57926}, abs=1e-4)
    cost = rep.glue_values("cost")
    assert (cost["ch10_n_in_dyn"], cost["ch10_n_in_att"]) == (64, 16)
    assert "both on one u_hat of 16 input capsules" in rep.verdicts_html(cap_em=0.342)
    assert glued["ch10_routing_test_ci"] == "-0.012 to +0.001"
    assert glued["em_cost_ratio"] == pytest.approx(249.533, abs=1e-2)
    assert glued["ch10_spread_state"] == "was still rising at the end (+0.007 over its last three epochs)"
    assert "activation cap of 0.342, still rising at the end" in rep.verdicts_html(cap_em=0.342)
    assert "<td>attention</td><td>1 of 3</td><td>3 of 24</td>" in rep.ties_html()


def test_a_partial_folder_pairs_the_seeds_it_has(tmp_path, monkeypatch, data, stand_in):
    spread = [f"em-spread-seed{s}.json" for s in range(3)]
    copy_of(tmp_path, monkeypatch, leave_out=[*spread, "dynamic-seed2.json"])
    rep = routing_report(stand_in, data)
    assert rep.from_stored and not rep.has_spread and "11 of 15 trainings finished" in rep.stored_text()
    assert rep.verdicts["routing_test"].comparison["seeds"] == [0, 1]
    assert rep.verdicts["spread_test"].verdict == rep.verdicts["spread_affine"].verdict == "pending"
    assert rep.glue_values("verdicts")["ch10_spread_state"] == "is not in this copy"
    assert "not stored yet: the run is in progress" in rep.verdicts_html(cap_em=0.342)


def test_a_folder_without_an_original_method_leaves_the_page_to_the_preview(tmp_path, monkeypatch, data, stand_in):
    copy_of(tmp_path, monkeypatch, leave_out=[f"em-seed{s}.json" for s in range(3)])
    rep = routing_report(stand_in, data)
    assert rep.stored is not None and rep.final is stand_in and rep.source == LIVE
    assert rep.per_seed_text().endswith("not yet trained in the stored run: em; the rest of the page uses the preview")
    assert rep.budget_html().startswith(f"<p><b>Budget box</b>, {LIVE}</p>")


def test_a_damaged_file_is_one_line_and_the_preview_stands_in(tmp_path, monkeypatch, data, stand_in):
    path = copy_of(tmp_path, monkeypatch) / "none-seed1.json"
    text = path.read_text()
    at = text.index('"test": 0.') + len('"test": 0.')
    path.write_text(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1:])
    rep = routing_report(stand_in, data)
    assert rep.stored is None and rep.final is stand_in and rep.source == LIVE
    assert "\n" not in rep.note and "none-seed1.json" in rep.note
    assert rep.note.endswith("showing the live preview instead (not the stored run)")
    assert rep.stored_text().startswith(rep.note + "\nMake the stored run with:")
    assert rep.verdicts["att_test"].comparison["seeds"] == [0]                    # the stand-in's one seed
