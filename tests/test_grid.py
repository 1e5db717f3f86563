"""An experiment's grid of (model, seed) runs spread over processes: ``--devices``, ``--shard``, torchrun.

The end-to-end tests run chapter 9's robustness experiment at its smoke preset with two seeds (6 runs of
a few seconds, seeded: on one CPU thread a rerun gives the same numbers, timing aside) and compare the
merged file with one process's run of the same command.
"""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run, snapshot

from capsedu.experiments import robustness
from capsedu.experiments.shared import grid
from capsedu.experiments.shared.grid import GridShard, merge_shards, merged, shard_path
from capsedu.experiments.shared.runs import start_experiment
from capsedu.runtime.lock import OutputLock, OwnedFolder
from capsedu.runtime.stored import read_stored, write_stored

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
COMMAND = ["robustness", "--preset", "smoke", "--seeds", "0", "1", "--no-progress"]
GRID = [(m, s) for s in (0, 1) for m in robustness.PRESETS["smoke"].models]   # one process's order
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def capsedu(*argv, timeout=300):
    return subprocess.run([sys.executable, "-m", "capsedu", *argv], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def measured(value):
    """A record without what timing changes (seconds, images per second)."""
    if isinstance(value, dict):
        return {k: measured(v) for k, v in value.items() if "seconds" not in k and k not in ("images_per_s", "note")}
    if isinstance(value, list):
        return [measured(v) for v in value]
    return value


def by_key(data):
    return {grid.record_key(r): r for r in data["runs"]}


def same_runs(data, reference):
    """The same (model, seed) runs with the same numbers (timing aside), and the same summary."""
    assert [grid.record_key(r) for r in data["runs"]] == GRID
    assert measured(by_key(data)) == measured(by_key(reference))
    assert measured(data["summary"]) == measured(reference["summary"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process's run of the command (on one thread)."""
    out = tmp_path_factory.mktemp("one") / "r.json"
    done = capsedu(*COMMAND, "--out", str(out), "--threads", "1", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    return read_stored(out, require_checksum=True)


def leftovers(folder: Path):
    return sorted(p.name for p in folder.iterdir() if ".shard-" in p.name or p.name.endswith((".ckpt", ".lock")))


# ---------------------------------------------------------------- the split and the merge
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_the_shards_split_the_grid_round_robin_each_run_once(tmp_path, count):
    config = dataclasses.replace(robustness.PRESETS["smoke"], seeds=(0, 1, 2))
    keys = [(m, s) for s in config.seeds for m in config.models]
    taken = []
    for k in range(count):
        _, _, result, _ = start_experiment(config, robustness.RobustnessConfig, tmp_path / "r.json", "r.json", False,
                                           "cpu", None, "smoke", None, data=object(), shard=GridShard(k, count))
        mine = [(m, s) for s, m in result.todo(config.seeds, config.models)]
        assert mine == [key for i, key in enumerate(keys) if i % count == k]
        taken += mine
        result.release()
    assert sorted(taken) == sorted(keys) and len(taken) == len(keys)


def test_a_shard_skips_the_runs_out_holds_and_its_own_finished_ones(tmp_path):
    """Shard 0 of 2 has cnn 0, cnn-ce 0, capsnet 1; shard 1 capsnet 0, cnn 1, cnn-ce 1. --out holds both
    cnn runs, shard 1's file capsnet 0; with --fresh a shard ignores --out and starts its file over."""
    config = dataclasses.replace(robustness.PRESETS["smoke"], seeds=(0, 1))
    header = json.loads(json.dumps({"command": "c", "date": "2026-01-01T00:00:00+00:00",
                                    "settings": dataclasses.asdict(config)}))
    write_stored({**header, "runs": [{"model": "cnn", "seed": 0}, {"model": "cnn", "seed": 1}]}, tmp_path / "r.json")
    write_stored({**header, "shard": {"index": 1, "count": 2}, "runs": [{"model": "capsnet", "seed": 0}]},
                 shard_path(tmp_path / "r.json", GridShard(1, 2)))
    todo = {}
    for k, fresh in ((0, False), (1, False), (1, True)):
        _, _, result, _ = start_experiment(config, robustness.RobustnessConfig, tmp_path / "r.json", "r.json", fresh,
                                           "cpu", None, "smoke", None, data=object(), shard=GridShard(k, 2))
        todo[k, fresh] = result.todo(config.seeds, config.models)
        assert result.data["shard"]["fresh"] is fresh
        result.release()
    assert todo == {(0, False): [(0, "cnn-ce"), (1, "capsnet")], (1, False): [(1, "cnn-ce")],
                    (1, True): [(0, "capsnet"), (1, "cnn"), (1, "cnn-ce")]}


def _shard(tmp_path, k, runs, settings=None, done=True, **extra):
    path = shard_path(tmp_path / "r.json", GridShard(k, 2))
    data = {"command": f"shard {k}", "date": f"2026-01-0{k + 1}T00:00:00+00:00", "device": f"cuda:{k}",
            "settings": settings or {"seeds": [0, 1]}, "shard": {"index": k, "count": 2, "done": done},
            "runs": runs, "seconds": 10.0 + k, **extra}
    return path, write_stored(data, path)


RUNS = [{"model": m, "seed": s, "acc": 0.5 + 0.1 * s + (m == "b") * 0.01} for s in (0, 1) for m in ("a", "b")]


def test_merging_two_shards_gives_the_union_in_the_grid_order(tmp_path):
    shards = [_shard(tmp_path, 0, RUNS[0::2]), _shard(tmp_path, 1, RUNS[1::2])]
    order = [{"model": r["model"], "seed": r["seed"]} for r in RUNS]
    data = merged(None, shards, summarise=lambda runs: {"n": len(runs)}, order=order)
    assert data["runs"] == RUNS and data["summary"] == {"n": 4}
    assert data["seconds"] == 21.0 and data["device"] == "cuda:0,cuda:1" and data["started"] == "2026-01-01T00:00:00+00:00"
    assert [s["file"] for s in data["shards"]] == ["r.shard-0-of-2.json", "r.shard-1-of-2.json"] and "shard" not in data
    main = {"settings": {"seeds": [0, 1]}, "runs": [RUNS[0]], "seconds": 5.0, "date": "2025-12-31T00:00:00+00:00"}
    again = merged(main, shards, order=order)                    # a run in --out and in a shard, the same record
    assert again["runs"] == RUNS and again["seconds"] == 26.0 and again["started"] == main["date"]


def test_merging_refuses_other_settings_and_a_run_with_two_records(tmp_path):
    with pytest.raises(ValueError, match=r"r.shard-1-of-2.json holds runs of other settings .*seeds"):
        merged(None, [_shard(tmp_path, 0, RUNS[:2]), _shard(tmp_path, 1, RUNS[2:], settings={"seeds": [0]})])
    other = {**RUNS[0], "acc": 0.9}
    with pytest.raises(ValueError, match=r"a seed 0 is in r.shard-0-of-2.json and in r.shard-1-of-2.json with different"):
        merged(None, [_shard(tmp_path, 0, RUNS[:2]), _shard(tmp_path, 1, [other, *RUNS[2:]])])


def test_merge_shards_waits_for_every_shard_then_writes_out_and_only_then_removes_them(tmp_path):
    out = tmp_path / "r.json"
    _shard(tmp_path, 0, RUNS[0::2])
    _shard(tmp_path, 1, RUNS[1::2], done=False)                  # still running
    before = snapshot(tmp_path)
    assert merge_shards(out, 2) is None and snapshot(tmp_path) == before
    _shard(tmp_path, 1, RUNS[1::2])
    OwnedFolder(tmp_path / "r.shard-1-of-2.ckpt").hand_out("b-seed1.pt").write_bytes(b"x")
    (tmp_path / "r.shard-1-of-2.ckpt" / "mine.txt").write_text("the user's")   # not the run's: it stays
    data = merge_shards(out, 2, summarise=lambda runs: len(runs))
    assert read_stored(out, require_checksum=True) == data and data["summary"] == 4
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["mine.txt", "r.json", "r.shard-1-of-2.ckpt"]
    _shard(tmp_path, 0, RUNS[:2], settings={"seeds": [7]})   # --out of other settings: nothing is removed
    _shard(tmp_path, 1, RUNS[2:], settings={"seeds": [7]})
    with pytest.raises(ValueError, match="--out holds runs of other settings"):
        merge_shards(out, 2)
    assert (tmp_path / "r.shard-0-of-2.json").is_file() and (tmp_path / "r.shard-1-of-2.json").is_file()


def test_a_shard_without_a_file_is_done_when_out_holds_its_runs(tmp_path):
    """A shard with nothing to train writes no file (--out holds all its runs): the others merge without it."""
    out, order = tmp_path / "r.json", [{"model": r["model"], "seed": r["seed"]} for r in RUNS]
    write_stored({"settings": {"seeds": [0, 1]}, "runs": RUNS[1::2]}, out)      # shard 1's runs
    _shard(tmp_path, 0, RUNS[0::2])
    assert merge_shards(out, 2) is None                                         # without the grid: not known
    assert merge_shards(out, 3, order=order) is None                            # split into 3: shards 1, 2 missing
    write_stored({"settings": {"seeds": [0, 1]}, "runs": RUNS[1:2]}, out)       # b seed 1 missing: shard 1 to run
    assert merge_shards(out, 2, order=order) is None
    write_stored({"settings": {"seeds": [0, 1]}, "runs": RUNS[1::2]}, out)
    assert merge_shards(out, 2, order=order)["runs"] == RUNS and leftovers(tmp_path) == []


# ---------------------------------------------------------------- the command line
@pytest.mark.parametrize("extra, match", [
    (["--devices", "cpu,cpu"], "--devices splits the grid into files beside --out"),
    (["--shard", "0/2"], "--shard splits the grid into files beside --out"),
    (["--devices", "cpu,cuda:99", "--out", "{tmp}"], "--devices cpu,cuda:99: device="),
    (["--devices", "cpu,,cpu", "--out", "{tmp}"], "argument --devices: expected a comma list"),
    (["--shard", "2/2", "--out", "{tmp}"], r"argument --shard: expected K/N.* got '2/2'"),
    (["--shard", "1-2", "--out", "{tmp}"], r"argument --shard: expected K/N.* got '1-2'"),
    (["--shard", "0/2", "--devices", "cpu,cpu", "--out", "{tmp}"], "pass one of the two"),
])
@pytest.mark.parametrize("command", ["robustness", "two-digits"])
def test_bad_grid_flags_are_one_line_and_create_nothing(tmp_path, capsys, command, extra, match):
    try:
        code, _, err = run(capsys, command, "--preset", "smoke", "--no-progress", *[a.format(tmp=tmp_path) for a in extra])
    except SystemExit as stop:                                 # argparse: exit code 2
        code, err = stop.code, capsys.readouterr().err.strip().splitlines()
    assert code in (1, 2) and len(err) == 1 and re.search(match, err[0]), err
    assert list(tmp_path.iterdir()) == []


def test_under_torchrun_the_rank_is_the_shard_and_shard_or_devices_clash(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    args = type("Args", (), {"devices": None, "shard": None, "out": "x"})
    assert grid.choose(args) == GridShard(1, 2)
    code, _, err = run(capsys, *COMMAND, "--out", str(tmp_path), "--shard", "0/2")
    assert code == 1 and "under torchrun (WORLD_SIZE=2) each process takes the shard of its RANK; drop --shard" in err[0]
    code, _, err = run(capsys, *COMMAND)
    assert code == 1 and "torchrun (WORLD_SIZE=2) splits the grid into files beside --out" in err[0]


def test_an_unfinished_split_into_another_count_is_one_line(tmp_path, capsys):
    _shard(tmp_path, 0, [])
    before = snapshot(tmp_path)
    for extra in ([], ["--devices", "cpu,cpu,cpu"]):
        code, _, err = run(capsys, *COMMAND, "--out", str(tmp_path / "r.json"), *extra)
        assert code == 1 and len(err) == 1 and "r.shard-0-of-2.json beside" in err[0] and "into 2 shards" in err[0]
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- end to end
def test_devices_merge_into_the_one_process_run_skipping_what_is_stored(tmp_path, reference):
    """--out holds one finished run, shard 1's file another (an interrupted earlier try): neither is
    trained again (their records come through verbatim); the other four are, and the merge equals
    one process's run; no shard file, lock or checkpoint folder is left."""
    out, ref = tmp_path / "r.json", by_key(reference)
    header = {k: v for k, v in reference.items() if k not in ("runs", "summary", "format", "checksum")}
    kept = {("cnn", 0): {**ref[("cnn", 0)], "note": "in --out"}, ("capsnet", 0): {**ref[("capsnet", 0)], "note": "shard"}}
    write_stored({**header, "runs": [kept[("cnn", 0)]]}, out)
    write_stored({**header, "shard": {"index": 1, "count": 2}, "runs": [kept[("capsnet", 0)]]},
                 shard_path(out, GridShard(1, 2)))
    done = capsedu(*COMMAND, "--out", str(out), "--devices", "cpu,cpu", "--threads", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    data = read_stored(out, require_checksum=True)
    assert json.loads(done.stdout) == data
    same_runs(data, reference)
    assert all(by_key(data)[k] == record for k, record in kept.items())
    assert [s["runs"] for s in data["shards"]] == [2, 3] and data["shards"][0]["threads"] == 1
    assert leftovers(tmp_path) == []
    again = capsedu(*COMMAND, "--out", str(out), "--devices", "cpu,cpu", "--threads", "2")   # all done: nothing trains
    assert again.returncode == 0 and "holds all its runs" in again.stderr, again.stderr[-3000:]
    assert read_stored(out) == data and json.loads(again.stdout) == data and leftovers(tmp_path) == []


def test_a_failed_shard_is_named_and_the_rerun_resumes_each_shard(tmp_path, reference):
    out = tmp_path / "r.json"
    lock = OutputLock(shard_path(out, GridShard(1, 2))).acquire()   # shard 1 cannot start
    try:
        done = capsedu(*COMMAND, "--out", str(out), "--devices", "cpu,cpu")
    finally:
        lock.release()
    assert done.returncode == 1 and "shard 1/2 (--device cpu, exit code 1) failed" in done.stderr.splitlines()[-1]
    assert not out.exists() and leftovers(tmp_path) == ["r.shard-0-of-2.json"]
    first = read_stored(shard_path(out, GridShard(0, 2)))
    assert [grid.record_key(r) for r in first["runs"]] == GRID[0::2] and first["shard"]["done"]
    done = capsedu(*COMMAND, "--out", str(out), "--devices", "cpu,cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    data = read_stored(out, require_checksum=True)
    same_runs(data, reference)
    assert [by_key(data)[grid.record_key(r)] for r in first["runs"]] == first["runs"]   # not trained again
    assert leftovers(tmp_path) == []


def test_torchrun_ranks_are_the_shards_and_merge_into_the_one_process_run(tmp_path, reference):
    out = tmp_path / "r.json"
    done = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node", "2", "-m", "capsedu", *COMMAND, "--out",
                           str(out), "--device", "cpu", "--threads", "1"], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    data = read_stored(out, require_checksum=True)
    assert json.loads(done.stdout) == data                     # one JSON: the merged run, from the last rank
    same_runs(data, reference)
    assert leftovers(tmp_path) == []
