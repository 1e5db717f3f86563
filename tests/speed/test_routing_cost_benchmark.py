"""benchmarks/routing_cost.py: chapter 10's cost verdict pairs its rounds, so each method must have
one timing per round, in the stored JSON the chapter reads."""
import json
from pathlib import Path

import pytest
from cli_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_every_method_has_one_timing_per_round(capsys):
    bench = load_script("benchmarks/routing_cost.py")
    bench.main(["--rounds", "2", "--repeats", "1", "--batch", "2", "--methods", "dynamic", "none", "attention"])
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "routing_cost" and out["rounds"] == 2 and out["batch"] == 2
    assert set(out["methods"]) == {"dynamic", "none", "attention"}
    for m in out["methods"].values():
        for field in ("routing_fwd_ms", "routing_fwd_bwd_ms"):
            assert len(m[field]) == 2 and all(v > 0 for v in m[field])
    # dynamic and none are one network that differs only in its routing iterations
    assert out["methods"]["dynamic"]["params"] == out["methods"]["none"]["params"]
    for key in ("command", "date", "hardware", "torch", "load_average_before_after"):
        assert key in out
    # equal work: both routings on one u_hat at each network's own number of input capsules
    eq = out["equal_work"]
    assert set(map(int, eq["ms"])) == set(eq["input_capsules"].values()) == {64, 16}
    for t in eq["ms"].values():
        assert {len(t["dynamic"]), len(t["attention"])} == {2} and min(t["dynamic"] + t["attention"]) > 0


def test_one_round_is_refused():
    with pytest.raises(SystemExit):
        load_script("benchmarks/routing_cost.py").main(["--rounds", "1"])


def test_the_stored_benchmark_is_what_chapter_10_reads():
    stored = sorted((ROOT / "benchmarks" / "results").glob("routing_cost-*.json"))
    assert stored, "chapter 10's cost verdict needs a stored routing-cost benchmark"
    data = json.loads(stored[-1].read_text())
    rounds = {len(m["routing_fwd_bwd_ms"]) for m in data["methods"].values()}
    assert rounds == {data["rounds"]} and data["rounds"] >= 2
    assert {"dynamic", "attention", "em"} <= set(data["methods"])
