"""Chapter 7's reader (capsedu/reports/two_digits*.py) on the stored runs, and on partial and damaged copies.

The stored numbers asserted here are the ones the executed chapter prints; a stand-in for the live
preview (the stored run itself, marked as not stored) keeps the file fast: nothing is trained.
"""
import html
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

import capsedu.runtime.results
import capsedu.runtime.stored
from capsedu.experiments.two_digits.run import make_model
from capsedu.reports.two_digits import PREVIEW, two_digit_report, verdicts
from capsedu.reports.two_digits_causes import InkGaps, ink_gap, settings_report
from capsedu.reports.verdicts import CANNOT_TELL, HOLDS

RESULTS = Path(__file__).resolve().parents[2] / "results"


@pytest.fixture(scope="module")
def stored():
    long, control = two_digit_report("two_digits_long"), two_digit_report("two_digits_r1", control=True)
    assert long.stored and control.stored, (long.note, control.note)
    return long, control


@pytest.fixture
def copied(tmp_path, monkeypatch):
    """The two-digit folders copied into tmp_path, which the readers then read instead of results/."""
    for name in ("two_digits_long", "two_digits_r1", "two_digits_variants"):
        shutil.copytree(RESULTS / name, tmp_path / name)
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    return tmp_path


def test_the_stored_runs_read_as_the_chapter_prints_them(stored):
    long, control = stored
    assert long.describe().splitlines()[2].startswith("  12 of 12 networks trained (12 epochs each, batch 16, 1,000 pairs")
    assert "3 of 3 seeds trained, iterations = 1" in control.describe()
    assert "<td>capsule-su-march</td><td>279,488</td><td>3</td><td>0.987 ± 0.001</td><td>0.928 ± 0.015</td>" in long.table()
    assert long.ties() == "ties: none in the 36 (run, layout) pairs; counting ties as misses changes nothing"
    assert "<td>capsule-hinton</td><td>60-70% (from memory)</td><td>not reported</td>" in long.against_su()
    lines = long.seed_by_seed(heads=("pooling", "capsule-su"))
    assert lines[0] == "vertical    top-2, capsule-su       - pooling: +0.65, +0.51, +0.52  (3/3 seeds > 0)"
    assert lines[-1].endswith("capsule-su-march vertical: share of top-2 hits whose second score is not above 0.5: 0.00")
    v = verdicts(long, control)
    assert v.heading == "verdicts from the stored run and the stored r = 1 control"
    assert ("+0.560 [+0.365, +0.755], p = 0.006 (3 seeds; seeds only: no per-item outcomes stored)</td>"
            "<td>primary</td><td>- (no per-item outcomes)</td><td>holds</td>") in v.table()
    # a secondary row whose interval clears zero but whose Holm-adjusted p does not: no verdict
    assert v.rows["hinton_vert"]["p_holm"] == pytest.approx(0.0957, abs=1e-3) and v.verdict("hinton_vert") == CANNOT_TELL
    assert "(clear of zero, but not after Holm's correction over 12 rows)" in html.unescape(v.table())
    assert v.mcnemar().startswith("McNemar's test in 0 of 15 rows; no per-image outcomes stored for capsule-hinton, "
                                  "capsule-su, capsule-su-march, pooling (")
    glued = v.glued()
    assert glued["ch7_n_pairs"] == 1000 and round(glued["ch7_su_vert"], 3) == 0.560
    assert glued["ch7_su_hor_ci"] == "-0.08 to +0.42" and glued["ch7_su_hor_verdict"] == CANNOT_TELL
    assert [v.verdict(k) for k in ("r1_pool", "r1_vert")] == [HOLDS, CANNOT_TELL]
    assert "it rules out all of the capsule advantage (su − pooling) +0.17, though not 83% of it" in html.unescape(
        v.table())

    assert "capsule-su-march − capsule-su-r1</td><td>+0.040 [-0.050, +0.131]" in v.table()


def test_no_stored_two_digit_run_names_two_heads_alike():
    """The one-iteration control is stored as "capsule-su-r1", which always routes once; a "capsule-su" routes 3 times."""
    files = sorted(RESULTS.glob("two_digits_*/*.json")) + sorted(RESULTS.glob("two_digits_variants/*/*.json"))
    names = {}
    for path in files:
        data = capsedu.runtime.stored.read_stored(path, require_checksum=True)
        model = data["run"]["model"]
        head = make_model(model, iterations=data["settings"]["iterations"])
        names.setdefault(model, set()).add(getattr(getattr(head, "capsules", None), "iterations", None))
    assert names["capsule-su-r1"] == {1} and names["capsule-su"] == {3}, names
    assert all(len(kinds) == 1 for kinds in names.values()), names


def test_the_settings_read_as_the_chapter_prints_them():
    s = settings_report()
    assert not s.notes and len(s.rows) == 7
    # 15 comparisons in one Holm family: of the six intervals that exclude zero, one survives
    assert s.lines() == [
        "twice the epochs         capsule-su: horizontal top-2 +0.107",
        "λ = 0.5                  nothing survives Holm",
        "squash k = 1             nothing survives Holm",
        "PyTorch initialisation   nothing survives Holm"]
    assert s.glued() == {"variants_n": 15, "variants_matter_n": 1, "variants_epochs": s.lines()[0][25:],
                         "variants_quiet": "λ = 0.5, squash k = 1, PyTorch initialisation", "variants_hurt": ""}
    assert sum("<td>cannot tell</td>" in row for row in s.comparisons().split("<tr>")) == 14


def test_a_partial_folder_is_read_for_what_it_holds(copied, stored):
    for path in copied.glob("two_digits_long/capsule-su-march-seed*.json"):
        path.unlink()
    (copied / "two_digits_long/pooling-seed2.json").unlink()
    long = two_digit_report("two_digits_long", live=stored[0].result)
    assert long.stored and "  8 of 12 networks trained" in long.describe()
    assert long.models == ["pooling", "capsule-su", "capsule-hinton"]
    v = verdicts(long, two_digit_report("two_digits_r1", control=True))
    assert v.comparison("march_vert") is None and v.verdict("march_vert") == CANNOT_TELL
    assert "capsule-su-march − pooling</td><td>not stored in this copy" in v.table()
    assert math.isnan(v.glued()["ch7_march_vert"]) and v.glued()["ch7_march_vert_ci"] == "none"
    assert v.comparison("su_vert")["seeds"] == [0, 1]          # paired on the seeds both heads still have


def test_a_damaged_file_falls_back_with_one_line(copied, stored):
    for name in ("two_digits_long/capsule-su-seed1.json", "two_digits_r1/capsule-su-r1-seed0.json",
                 "two_digits_variants/preset/pooling-seed0.json"):
        path = copied / name
        text = path.read_text()
        at = re.search(r'"single_acc": 0\.(\d)', text).start(1)    # one digit of a result, not of the seal
        path.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
    stand_in = {**stored[0].result, "device": "cpu", "trained": {}}    # a live preview's header names its device
    long = two_digit_report("two_digits_long", live=stand_in)
    assert not long.stored and long.result is stand_in and long.label == "the live preview"
    assert "\n" not in long.note and "capsule-su-seed1.json" in long.note and long.note.endswith(PREVIEW)
    assert long.describe().startswith("live preview: trained on 9,000 single digits (sample)")
    control = two_digit_report("two_digits_r1", control=True)
    assert control.result is None and control.describe().endswith("; the verdict below cannot use it")
    v = verdicts(long, control)
    assert v.heading == "verdicts from the live preview" and v.comparison("r1_pool") is None
    settings = settings_report()
    assert len(settings.notes) == 1 and "preset/pooling-seed0.json" in settings.notes[0]
    assert not settings.notes[0].endswith(PREVIEW) and not settings.changes and len(settings.rows) == 5


def test_the_ink_gap_counts_the_blank_pixels_between_the_digits():
    images = torch.zeros(2, 1, 56, 28)
    images[0, 0, 20, 5] = images[0, 0, 30, 5] = 1.0              # ink in rows 20 and 30: 9 blank rows
    images[1, 0, 27, 3] = images[1, 0, 28, 9] = 1.0              # touching halves: no blank row
    assert ink_gap(images, "vertical").tolist() == [9.0, 0.0]
    assert ink_gap(images.transpose(2, 3), "horizontal").tolist() == [9.0, 0.0]
    gaps = InkGaps({"vertical": torch.tensor([0.0, 8.0, 8.0, 8.0, 12.0])},
                   {"vertical": {"pooling": torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])}})
    assert gaps.hit_rate("vertical", "pooling", 0, 10) == (1.0 + 3 * 0.33) / 4   # bins rounded as printed
    assert "<td>vertical</td><td>10-13</td><td>1</td><td>1.00</td>" in gaps.table()
