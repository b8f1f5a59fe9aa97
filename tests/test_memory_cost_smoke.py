"""Smoke test of benchmarks/probe.py memory-cost (benchmarks/probes/memory_cost.py): the MLP,
LSTM and GRU policies on CartPole with the velocities hidden, acting and learning, on --quick's
tiny budget; and its reading of the CPU's flags."""
import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import probe  # noqa: E402  (benchmarks/ on the path first)
from probes import memory_cost  # noqa: E402


@pytest.mark.unit
def test_cpu_flags_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\n"
                       "flags\t\t: fpu sse2 avx avx2 avx512f amx_tile amx_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert memory_cost.cpu_flags(str(cpuinfo)) == dict(avx2=True, avx512f=True,
                                                       avx512_bf16=False, amx=True)
    assert memory_cost.cpu_flags(str(tmp_path / "none")) == dict.fromkeys(memory_cost.CPU_FLAGS)


@pytest.mark.contract
def test_memory_cost_quick(tmp_path, capsys):
    out = tmp_path / "memory-cost.json"
    probe.main(["memory-cost", "--quick", "--out", str(out)])
    with open(out) as f:
        result = json.load(f)
    assert result["command"] == f".venv/bin/python benchmarks/probe.py memory-cost --quick --out {out}"
    assert result["shape"] == dict(num_envs=8, rollout_steps=32, batch_size=256, num_epochs=10)
    assert set(result["cpu"]["flags"]) == set(memory_cost.CPU_FLAGS)
    assert result["torch"] and result["torch_threads"] == 1 and "commit" in result
    policies = result["policies"]
    assert [policies[k]["recurrent"] for k in ("mlp", "lstm", "gru")] == [False, True, True]
    assert all(p["samples"] == 256 for p in policies.values())
    assert policies["lstm"]["sequences"] == policies["gru"]["sequences"] == 8
    assert len(result["measurements"]) == 3 * memory_cost.QUICK["repeats"]
    for key in ("mlp", "lstm", "gru"):
        summary = result["summary"][key]
        for row_key, *_ in memory_cost.ROWS:
            if row_key != "rest_us":  # a difference: noise may push it anywhere
                assert summary[row_key]["median"] > 0, (key, row_key)
    for pair in ("lstm/mlp", "gru/mlp"):
        assert all(r is not None and r > 0 for r in result["ratios"][pair].values()), pair
    printed = capsys.readouterr().out
    assert result["markdown"] in printed
    assert printed.count("| learning:") == 2
