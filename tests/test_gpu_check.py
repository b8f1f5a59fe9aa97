"""benchmarks/gpu_check.py --dry_run: every phase of the GPU check runs on the CPU (the same code
paths as on a GPU machine, tiny budgets), so the script a lent GPU machine runs cannot rot
between the sessions that have one. And the report's parts by hand."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gpu_check  # noqa: E402  (benchmarks/gpu_check.py)


@pytest.mark.e2e
def test_the_dry_run_runs_every_phase_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry_run", "--out",
                           str(out), "--work", str(tmp_path / "work")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["gpu_check.json", "gpu_check.md", "log.txt",
                                       "runs.tar.gz"]  # few files: the GPU machine sends 8
    results = json.loads((out / "gpu_check.json").read_text())
    phases = results["phases"]
    assert list(phases) == list(gpu_check.PHASES) and all(p["ok"] for p in phases.values())
    assert results["dry_run"] and phases["probe"]["cores"] >= 1

    runs = phases["learning"]["runs"]
    assert set(runs) == set(gpu_check.DRY_RUNS) <= set(gpu_check.LEARNING_RUNS)
    for name, run in runs.items():
        summary = run["summary"]
        assert run["returncode"] == 0 and summary["stopped_because"] == "total_steps", name
        # evaluated at least once (the last one may end with the run, after its last row)
        assert summary["last_eval_return"] is not None, name
        assert summary["devices"] and all(d["device"] == "cpu" for d in summary["devices"])
        assert "--gpu" not in run["command"] and "--num_gpus" not in run["command"]
    # with --no-elastic_start every gradient comes from the Ray workers
    assert all(d["role"].startswith("rollout worker") and "in-process" not in d["role"]
               for d in runs["ppo_seed_line_ray"]["summary"]["devices"])

    updates = phases["updates"]["results"]
    assert len(updates) == len(gpu_check.UPDATE_CONFIGS)
    for r in updates:
        if "skipped" in r:  # compiling, and emulated bf16 on a CNN: seconds an update
            assert r["skipped"] == "not in a dry run" and (
                r["mode"] in gpu_check.DRY_SKIPPED_MODES
                or (r["workload"].endswith("-atari") and r["precision"] == "bf16")), r
            continue
        assert r["device"] == "cpu" and r["samples_per_s"] > 0, r
        if r["mode"] in ("rounds", "graphs"):  # graphs: a round on the CPU, with a note
            assert r["device_rounds"] and not r["cuda_graphs"] and r["updates_per_call"] == 4
    match = phases["updates"]["graphs_match"]
    assert match["weights_max_abs_diff"] < 1e-6 and match["updates"] == 40, match

    points = phases["scaling"]["points"]
    assert points and all(p["steps_per_s"] and p["steps_per_s"] > 0 for p in points)
    # the env's own rate, its sleeps' overshoot included: the ceiling (5 ms: at most 200/s)
    assert 100 < phases["scaling"]["env_alone_steps_per_s"] <= 200
    # each point stopped once its window of steady state (all workers up) spanned 6 s
    assert all(p["stopped_at_window"] and p["window_s"] >= 6 and p["returncode"] == 143
               for p in points), points

    exported = phases["export"]["runs"]
    # every GPU run's policy (the seed line's through its --no-elastic_start twin); the dry
    # run made three of them
    assert set(exported) == {name for name, (_, gpu) in gpu_check.LEARNING_RUNS.items()
                             if gpu and name != "ppo_seed_line"}
    assert {n for n, r in exported.items() if "skipped" not in r} == {
        "dqn_lunar_gpu", "sac_lunar_gpu", "ppo_seed_line_ray"}
    for name, r in exported.items():
        if "skipped" not in r:
            assert r["cuda_visible"] is False and len(r["returns"]) == 2, (name, r)
            assert r["onnx_matches"], (name, r)

    report = (out / "gpu_check.md").read_text()
    for heading in ("## Learning runs", "## Learning throughput", "## Scaling",
                    "## Trained on the GPU, used without one"):
        assert heading in report
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/ppo_seed_line_ray/summary.json" in names and not any(n.endswith(".pt")
                                                                  for n in names)


@pytest.mark.unit
def test_the_dry_run_drops_the_gpu_flags_and_adds_its_budget():
    class Args:
        dry_run = True
    check = type("C", (), {"args": Args})()
    argv = gpu_check.learning_argv(check, "ppo_seed_line", gpu_check.SEED_LINE, "/r", 5)
    assert "--gpu" not in argv and "--num_gpus" not in argv
    assert argv[argv.index("--num_cpus") + 1] == "2" and argv.count("--num_cpus") == 1
    assert argv[-2:] == ["--run_dir", "/r"] and argv[argv.index("--max_time") + 1] == "5"
    Args.dry_run = False
    argv = gpu_check.learning_argv(check, "ppo_seed_line", gpu_check.SEED_LINE, "/r", 240)
    assert argv[argv.index("--gpu") + 1] == "0" and argv[argv.index("--num_gpus") + 1] == "1"
    assert argv[argv.index("--num_cpus") + 1] == "16" and "--total_steps" not in argv


@pytest.mark.unit
def test_the_batched_simulator_run_steps_on_cuda_and_its_dry_run_on_the_cpu():
    class Args:
        dry_run = False
    check = type("C", (), {"args": Args})()
    flags = gpu_check.LEARNING_RUNS["ppo_pointmass_gpu"][0]
    argv = gpu_check.learning_argv(check, "ppo_pointmass_gpu", flags, "/r", 60)
    assert argv[argv.index("--pm_device") + 1] == "cuda" and "--num_gpus" in argv
    Args.dry_run = True
    argv = gpu_check.learning_argv(check, "ppo_pointmass_gpu", flags, "/r", 60)
    assert "--pm_device" not in argv and "--num_gpus" not in argv
    # its own small budget (one round of 1,024 envs x 16 steps), still in one process
    assert argv[argv.index("--num_workers") + 1] == "0" and argv.count("--num_workers") == 1
    last = len(argv) - 1 - argv[::-1].index("--total_steps")  # the later flag wins
    assert argv[last + 1] == "16384"


@pytest.mark.unit
@pytest.mark.parametrize("cores, threads", [(16, "12"), (2, "1")])
def test_the_cpu_big_batch_runs_give_their_learner_the_cores_left(monkeypatch, cores, threads):
    """Against the GPU, the CPU's learner gets the cores the runs beside it leave, not the 2
    threads --learner_threads auto gives a process alone."""
    monkeypatch.setattr(gpu_check.os, "cpu_count", lambda: cores)

    class Args:
        dry_run = False
    check = type("C", (), {"args": Args})()
    for name in ("sac_lunar_cpu_bigbatch", "sac_cheetah_cpu_bigbatch"):
        argv = gpu_check.learning_argv(check, name, gpu_check.LEARNING_RUNS[name][0], "/r", 9)
        assert argv[argv.index("--learner_threads") + 1] == threads, argv


@pytest.mark.unit
def test_the_report_shows_where_the_updates_ran_and_what_failed():
    results = {"dry_run": False, "command": "benchmarks/gpu_check.py", "commit": "abc",
               "started": "now", "phases": {
                   "learning": {"ok": True, "max_time_s": 240, "runs": {"dqn_lunar_gpu": {
                       "command": "python main.py ...", "returncode": 0, "summary": {
                           "stopped_because": "target_return", "time_to_target_s": 123.4,
                           "steps_to_target": 45000, "best_eval_return": 210.5,
                           "steps_per_s": 380.2, "devices": [{
                               "role": "parameter server", "device": "cuda",
                               "cuda_device": "NVIDIA H100", "max_memory_allocated_mb": 42.0}]}}}},
                   "scaling": {"ok": False, "error": "TimeoutExpired: scaling.py"}}}
    text = gpu_check.markdown(results)
    assert ("| dqn_lunar_gpu | NVIDIA H100 (1 part) | target_return | yes | 123.4 | 45,000 | "
            "210.5 | 380 | 42.0 |") in text
    assert "## Phases that failed" in text and "- scaling: TimeoutExpired: scaling.py" in text
