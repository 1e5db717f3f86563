"""Chapter 11's reader (``capsedu.reports.tutorial``) on the stored runs, and on damaged or partial folders,
where the live preview stands in with the one-line note."""
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import capsedu.runtime.results
from capsedu.reports.tutorial import MAKE, pitfall_table, preview_summary, tutorial_report

STORED = Path(__file__).resolve().parents[2] / "results" / "tutorial_vs_fixed"
SAMPLE = SimpleNamespace(x_train=range(9000), x_test=range(1000))   # the reader takes only their sizes


def _run(model, test, misses, **extra):
    epochs = [{"epoch": 1, "test": test, **({"test_as_reported": test + 0.05} if model == "tutorial" else {})}]
    return {"model": model, "seed": 0, "params": 1, "test": test, "seconds": 4.0, "steps": 3,
            "misses": {"test": misses}, "epochs": epochs, **extra}


# a stand-in for the live preview: one seed, one epoch, 40 test digits
PREVIEW = {"settings": {"models": ["tutorial", "fixed"], "seeds": [0], "epochs": 1, "batch_size": 16, "lr": 0.001,
                        "n_train": 48, "n_test": 40, "source": "sample"},
           "runs": [_run("tutorial", 0.5, list(range(20)), test_changed_by_batching=2, non_finite_steps=[]),
                    _run("fixed", 0.25, list(range(30)))]}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A copy of the stored folder, read in place of results/."""
    shutil.copytree(STORED, tmp_path / "tutorial_vs_fixed")
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    return tmp_path / "tutorial_vs_fixed"


def test_the_stored_runs_give_what_the_chapter_prints():
    tvf, line = tutorial_report(PREVIEW, SAMPLE)
    assert tvf.stored and line.startswith("stored run: python -m capsedu tutorial-vs-fixed --preset long")
    g = tvf.glued()
    assert g["ch11_gap_text"] == ("+0.013 [+0.004, +0.021], p = 0.005 (3 seeds × 1,000 items); "
                                  "pooled McNemar 56 vs 18, p < 0.001")
    # the printed accuracy is ahead by the same +0.004 in every seed, but no per-item outcomes are stored for it
    assert (g["ch11_gap_verdict"], g["ch11_report_verdict"], g["ch11_tvf_source"]) == (
        "holds", "cannot tell at this budget", "the stored run")
    assert "+0.004 in every seed (3 seeds; no interval: no per-item outcomes stored)" in tvf.verdict_html()
    assert (g["ch11_tvf_seeds"], g["ch11_tvf_epochs"], g["ch11_tvf_ntrain"], g["ch11_nan_steps"]) == (3, 3, 9000, 0)
    assert (g["ch11_changed_min"], g["ch11_changed_max"], g["ch11_report_pos"], g["ch11_report_n"]) == (3, 4, 9, 9)
    assert g["ch11_tut_acc"] == pytest.approx(0.965) and g["ch11_fixed_acc"] == pytest.approx(0.977667)
    assert g["ch11_step_ratios"] == "1.48 to 5.42"     # per seed; step_ratio is the ratio of the mean times
    assert g["ch11_nan_text"] == "None of its 810 training steps, over 3 seeds, had a non-finite loss"
    assert g["ch11_step_ratio"] == pytest.approx(2.9204, abs=1e-4) and g["ch11_tvf_detect"] == pytest.approx(0.0139, abs=1e-4)
    assert "<td>tutorial 0.965, fixed 0.978</td>" in tvf.budget_html()
    assert "<td>tutorial: no (last epoch +0.017), fixed: no (last epoch +0.005)</td>" in tvf.budget_html()
    assert "changed for 3, 4, 4 of 1,000 digits (seed by seed)</td><td>-</td><td>-</td><td>does not hold" \
        in tvf.verdict_html()


def test_a_damaged_file_fails_its_checksum_and_the_preview_stands_in(folder):
    path = folder / "tutorial-seed1.json"
    path.write_text(path.read_text().replace('"test": 0.9', '"test": 0.8', 1))
    tvf, line = tutorial_report(PREVIEW, SAMPLE)
    note = line.splitlines()[0]
    assert not tvf.stored and "tutorial-seed1.json" in note and note.endswith("showing the live preview instead (not the stored run)")
    assert line.endswith(MAKE)
    assert tvf.glued()["ch11_tvf_source"] == "the live preview (no stored run at hand)" and tvf.seeds == [0]


def test_a_folder_without_one_model_falls_back_and_one_missing_seed_is_left_out(folder):
    (folder / "fixed-seed2.json").unlink()
    tvf, _ = tutorial_report(PREVIEW, SAMPLE)
    assert tvf.stored and tvf.seeds == [0, 1] and tvf.changed == [3, 4]   # tutorial seed 2 has no partner
    for path in folder.glob("fixed-*.json"):
        path.unlink()
    tvf, line = tutorial_report(PREVIEW, SAMPLE)
    assert not tvf.stored and "lacks what this chapter reads" in line and "both models" in line


def test_the_preview_lines_and_glued_values():
    lines, glued = preview_summary(PREVIEW, SAMPLE)
    assert lines.splitlines() == ["live preview: 48 training digits, 1 epoch(s), batch 16, seed 0, tested on 40 digits",
                                  "  tutorial test accuracy 0.500   (4 s)", "  fixed    test accuracy 0.250   (4 s)"]
    assert glued == {"ch11_prev_steps": 3, "ch11_prev_ahead": "tutorial"}


def test_the_pitfall_table_puts_each_measurement_in_its_row():
    m = dict(coef_sum=10 / 1152, change=0.2, flips=1, slope_tutorial=-1.0, slope_paper=-0.1, weaker=784.0,
             floor=0.000235, label=3, guess=7, picked_wrong=44, nan_outputs=4, nan_elementwise=1, randn_max=1.5e-4,
             small_min=2.1e-2, longest=3.33, positions=8)
    html = pitfall_table(m)
    assert html.count("<tr>") == 12   # the head and 11 rows
    assert "<td>2</td><td>b_ij + a_ij.mean(dim=0): one set of logits per batch</td><td>logits per example</td>" \
           "<td>a length changes by up to 0.200 with the batch; 1 of 32 predictions change</td>" in html
    assert "a 3 taken for a 7 trains capsule 7 to draw it; batch softmax: 44 of 100" in html
