"""Chapter 9's readers (``capsedu.reports.paper``, ``paper_exp23``) on the stored folders, a partial one and a
damaged one: the numbers the chapter prints, and the fall-back to the live preview with its one line."""
import html
import json
import re
import shutil

import pytest

import capsedu.runtime.results
from capsedu.data.mnist import load_dataset
from capsedu.experiments import ablation, multimnist, robustness
from capsedu.reports.paper import LIVE, STORED, robustness_report, verdict_table
from capsedu.reports.paper_exp23 import ablation_report, multimnist_report
from capsedu.reports.verdicts import CANNOT_TELL

STORED_RUNS = capsedu.runtime.results.results_dir()


@pytest.fixture(scope="module")
def live():
    """The three smoke-mode previews (seconds on a CPU): what stands in where no stored run is usable."""
    data = load_dataset("mnist", source="sample", verbose=False)
    run = dict(data=data, device="cpu", preset="smoke", progress=False)
    return data, (robustness.robustness_experiment(robustness.PRESETS["smoke"], **run),
                  ablation.ablation_experiment(ablation.PRESETS["smoke"], **run),
                  multimnist.multimnist_experiment(multimnist.PRESETS["smoke"], return_model=True, **run))


def test_the_stored_folders_give_the_chapters_numbers(live):
    data, (rob_live, abl_live, mm_live) = live
    rob, abl, mm = robustness_report(rob_live, data), ablation_report(abl_live, data), multimnist_report(mm_live, data)
    assert (rob.label, abl.label, mm.label, mm.model_label) == (STORED,) * 4
    assert "9 of 9 trainings finished" in rob.notes[0] and rob.notes[1] == "  models stored: cnn-ce, cnn, capsnet"
    # the interval covers seeds and test digits; "detectable" is one seed's paired test on the shared digits
    assert (rob.n, rob.top, rob.gap_ci, rob.verdict) == (1000, 1.0, "-0.035 to +0.006", CANNOT_TELL)
    assert rob.gap == pytest.approx(-0.014333, abs=1e-6) and rob.detect == pytest.approx(0.033424, abs=1e-6)
    assert rob.converged.startswith("not converged (epoch cap): 7 of 9 trainings stopped at the 8-epoch cap")
    assert "0.848 ± 0.008" in rob.table
    assert abl.canvas_words == "28×28 canvas with shifts of up to 2 pixels" and abl.papers
    assert 100 * abl.detect == pytest.approx(0.7234, abs=1e-4) and "test error 2.67 ± 0.15%" in abl.budget
    assert (mm.pairs, mm.error, mm.converged_words, mm.seeds_text) == (72000, pytest.approx(34.45), "has not converged", "1 seed")
    verdicts = verdict_table(rob, abl, mm)
    assert set(verdicts.verdicts.values()) == {CANNOT_TELL} and len(verdicts.verdicts) == 6
    assert verdicts.values["route_ci"] == "-0.006 to +0.008" and verdicts.values["loss_ci"] == "-0.043 to +0.045"
    assert verdicts.table.count("<tr>") == 7   # the head, five claims, MultiMNIST
    assert "the interval allows -0.040 to +0.019; it rules out the paper's affNIST gap +0.13" in html.unescape(
        verdicts.table)
    assert "<td>primary</td>" in verdicts.table and "Holm-adjusted" in verdicts.table


def test_a_partial_folder_is_read_as_far_as_it_goes(live, tmp_path, monkeypatch):
    data, (rob_live, _, _) = live
    full = robustness_report(rob_live, data).gap
    shutil.copytree(STORED_RUNS / "robustness", tmp_path / "robustness", ignore=shutil.ignore_patterns("cnn-ce-*"))
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    rob = robustness_report(rob_live, data)
    assert rob.label == STORED and "6 of 9 trainings finished" in rob.notes[0]
    assert rob.notes[-1] == "  no seed has all its models yet: cnn and capsnet are matched on their own"
    assert rob.models == {"cnn", "capsnet"} and "cnn-ce" not in rob.table
    assert rob.gap == full   # the pair was matched on its own before: the third model changes nothing
    assert rob.missing["rob_ce"] == "not stored yet (this run predates cnn-ce)"


def test_a_damaged_file_falls_back_to_the_live_preview(live, tmp_path, monkeypatch):
    data, (_, abl_live, _) = live
    shutil.copytree(STORED_RUNS / "ablation", tmp_path / "ablation")
    path = tmp_path / "ablation" / "r3-seed1.json"
    stored = json.loads(path.read_text())
    stored["run"]["clean_error"] += 1    # one changed number: the checksum no longer matches
    path.write_text(json.dumps(stored))
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    abl = ablation_report(abl_live, data)
    assert abl.label == LIVE and abl.result is abl_live and len(abl.notes) == 1
    assert re.search(r"r3-seed1\.json.*fails its checksum.*showing the live preview instead", abl.notes[0])
    assert abl.sign_note == "" and f"experiment 2, {LIVE}" in abl.budget
