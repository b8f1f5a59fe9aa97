"""Smoke tests of benchmarks/: every probe of benchmarks/probe.py, the side-by-side harness
(compare.py), the scaling grid (scaling.py) and the peer runs (sb3_ppo.py, sb3_sac.py), on budgets
of seconds, so that a change elsewhere that breaks one of them fails here and not on the day its
figure is measured again. Each test checks what the tool prints or writes (the figure lines, the
JSON's keys, values in range, a table rebuilt from a saved result equal to the published one),
never only that it exited.

Tiers: unit (parsing, verdicts, windows, tables rebuilt from benchmarks/results/), contract (a
probe run in this process), e2e (a tool as a user runs it, in a subprocess; one of them starts
Ray). The peer libraries (stable_baselines3, sb3_contrib, cpprb, py-spy) are optional: their
tests skip with a reason when they are absent. The probes that take minutes or start a Ray
cluster of their own (overheads, soak, sweep-time, a scaling point, the Atari probe's ddrl rows)
run only with DDRL_SLOW_PROBES=1 in the environment."""
import argparse
import csv
import glob
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.contract

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")
RESULTS = os.path.join(BENCH, "results")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import compare  # noqa: E402  (benchmarks/ on the path first)
import probe  # noqa: E402
import scaling  # noqa: E402
from probes import vector_ppo  # noqa: E402
from probes import appo_vs_sf, async_sync  # noqa: E402
from probes import (atari_throughput, ppo_vs_sb3_update, profile_sac,  # noqa: E402
                    replay_throughput, sampling_report, soak, soak_report, sweep_time)

SLOW = os.environ.get("DDRL_SLOW_PROBES") == "1"
slow = pytest.mark.skipif(not SLOW, reason="minutes or a Ray cluster of its own: "
                                           "DDRL_SLOW_PROBES=1 runs it")
DOCS = [os.path.join(REPO, "BENCHMARKS.md"), os.path.join(REPO, "BENCHMARKS-archive.md"),
        os.path.join(BENCH, "README.md")]


def needs(module):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (benchmarks/requirements.txt)")


def run_tool(*argv, timeout=300):
    """A benchmarks/ script in a subprocess from the repository root; fails on a non-zero exit."""
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def load(path):
    with open(path) as f:
        return json.load(f)


# -- the commands the documents quote -------------------------------------------------------
def documented_commands():
    """(file, script, argv) of every command line in the documents, the README and benchmarks/'s
    docstrings that runs a benchmarks/ script (continuation lines joined, comments dropped)."""
    scripts = glob.glob(os.path.join(BENCH, "*.py")) + glob.glob(os.path.join(BENCH, "probes", "*.py"))
    sources = DOCS + [os.path.join(REPO, "README.md")] + sorted(scripts)
    found = []
    for path in sources:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            text = re.sub(r"\\{1,2}\n\s*", " ", f.read())  # `\` (`\\` in a docstring) line ends
        for line in text.splitlines():
            match = re.match(r"\s*(?:\.venv/bin/)?python (benchmarks/[\w/]+\.py)(.*)$", line)
            if match:
                rest = re.sub(r"\[[^\]]*\]", "", match.group(2))  # [optional] usage parts
                argv = [a for a in shlex.split(rest, comments=True) if a != "&"]
                found.append((os.path.relpath(path, REPO), match.group(1), argv))
    return found


@pytest.mark.unit
def test_every_documented_command_still_parses(monkeypatch):
    """The commands BENCHMARKS.md, its archive, the READMEs and the tools' docstrings quote name
    scripts that exist, and their flags parse: probe.py's fully, scaling.py's fully, compare.py's suite and
    systems; the peer scripts (which import SB3 first) by their file alone."""
    commands = documented_commands()
    assert len(commands) > 40
    parser = probe.build_parser()
    suite_flags = argparse.ArgumentParser(add_help=False)
    suite_flags.add_argument("--suite", default="cartpole")
    suite_flags.add_argument("--systems", nargs="+", default=[])
    suite_flags.add_argument("--system", action="append", default=[])
    for where, script, argv in commands:
        label = f"{where}: {script} {shlex.join(argv)}"
        assert os.path.exists(os.path.join(REPO, script)), label
        name = os.path.basename(script)
        try:
            if name == "probe.py" and "-h" not in argv:  # -h prints and exits
                parser.parse_args(argv)
            elif name == "scaling.py":
                monkeypatch.setattr(sys, "argv", [script, *argv])
                scaling.parse_args()
        except SystemExit:
            pytest.fail(f"does not parse: {label}")
        if name == "compare.py":
            known, _ = suite_flags.parse_known_args(argv)
            assert known.suite in compare.SUITES, label
            adhoc = {spec.split("=", 1)[0] for spec in known.system}
            systems = set(compare.SUITES[known.suite]["systems"]) | adhoc
            assert set(known.systems) <= systems, label


@pytest.mark.unit
def test_every_probe_is_a_subcommand():
    """Each module of benchmarks/probes/ that measures is a subcommand, and each subcommand's
    help says what it measures (its module's docstring, with its own command lines)."""
    measured = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(BENCH, "probes", "*.py"))}
    helpers = {"__init__", "procfs", "sampling_report", "soak_report"}
    assert {module for module, _ in probe.PROBES.values()} == measured - helpers
    subparsers = next(a for a in probe.build_parser()._actions
                      if isinstance(a, argparse._SubParsersAction))
    for name in probe.PROBES:
        assert f"benchmarks/probe.py {name}" in subparsers.choices[name].description, name


def main_py_flags(argv):
    """Parse a main.py command line as main.py does; fail the test on a flag it does not know."""
    from options.options import parse_args
    assert os.path.basename(argv[1]) == "main.py", argv
    try:
        return parse_args(argv[2:])
    except SystemExit:
        pytest.fail(f"main.py refuses: {shlex.join(argv[1:])}")


@pytest.mark.unit
def test_the_main_py_command_lines_the_tools_build_still_parse(monkeypatch, tmp_path):
    """compare.py's ddrl systems, scaling.py's points, and the main.py runs of the probes: every
    flag they pass is still one main.py knows (a renamed flag fails here, not after an hour)."""
    monkeypatch.chdir(REPO)  # --user_dir benchmarks/plugins is relative to the root
    for cfg in compare.SUITES.values():
        for template in cfg["systems"].values():
            cmd = template.format(python=sys.executable, seed=0, run_dir=str(tmp_path),
                                  target=cfg["target"], max_steps=cfg["max_steps"])
            argv = shlex.split(cmd)
            if os.path.basename(argv[1]) == "main.py":
                main_py_flags(argv)
    monkeypatch.setattr(sys, "argv", ["scaling.py"])
    grid = scaling.parse_args()
    for system in grid.system_flags:
        for placement in ("worker", "actor", "actor1"):
            argv, _, _, _ = scaling.point_command(grid, system, placement, 4, str(tmp_path), None)
            main_py_flags(argv)
    for system in ("ddrl-0workers-1thread", "ddrl-2workers-ahead"):
        args = main_py_flags(atari_throughput.ddrl_command("ALE/Breakout-v5", 1024, 2, 2,
                                                           str(tmp_path), system.endswith("ahead")))
        assert args.total_steps == 1024 and args.torch_threads == 2
    parser = probe.build_parser()
    profile_args = parser.parse_args(["profile-sac"])
    assert main_py_flags(profile_sac.main_command(profile_args, str(tmp_path))).model_name == "sac"
    for vectorize in ("native", "none"):
        args = main_py_flags(vector_ppo.ddrl_argv(vectorize, 4096, 0, str(tmp_path)))
        assert args.vectorize == vectorize and args.num_envs_per_worker == 256
    for system in async_sync.SYSTEMS:
        args = main_py_flags(async_sync.argv(system, 8, 5.0, 1000, 0, str(tmp_path)))
        assert args.num_workers == 8 and args.slow_workers == (0,)
    assert main_py_flags(appo_vs_sf.ddrl_argv(1000, 0, str(tmp_path))).model_name == "appo"
    soak_args = parser.parse_args(["soak"])
    assert main_py_flags(soak.main_argv(soak_args, "127.0.0.1:6379", str(tmp_path))).num_workers == 8
    base = sweep_time.base_flags(50_000)
    main_py_flags(["python", "main.py", *sweep_time.sweep_flags(base, "asha", 8, str(tmp_path))])
    main_py_flags(["python", "main.py", *sweep_time.trial_flags(base, "0.001", "0.2",
                                                                str(tmp_path))])


def heading_anchors(path):
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped (hyphens
    and underscores kept), spaces as hyphens."""
    with open(path) as f:
        return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in f if line.startswith("#")}


@pytest.mark.unit
def test_benchmarks_md_links_resolve():
    """The headline table's rows link to sections that exist (each with its date, commit and
    CPU cells filled), the pointers into the archive to its headings, and every plot and result
    file either page names exists."""
    main, archive = DOCS[0], DOCS[1]
    with open(main) as f:
        text = f.read()
    anchors = {os.path.basename(main): heading_anchors(main),
               os.path.basename(archive): heading_anchors(archive)}
    links = re.findall(r"\]\(([\w\-.]*)#([^)]+)\)", text)
    assert links
    for page, anchor in links:
        assert anchor in anchors[page or os.path.basename(main)], (page, anchor)
    table = text.split("## Headline ratios", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), row
    for path in (main, archive):
        with open(path) as f:
            for name in re.findall(r"benchmarks/results/[\w\-.]+\.(?:png|json)", f.read()):
                assert os.path.exists(os.path.join(REPO, name)), (path, name)


# -- tables rebuilt from the saved results ---------------------------------------------------
@pytest.mark.unit
def test_compare_rebuilds_every_saved_suite():
    """compare.py's aggregate() gives, from the runs each saved suite recorded, the aggregates
    (reached, medians, ratios against the peer) the JSON holds: the ratios BENCHMARKS.md quotes
    still come out of the harness as it is."""
    suites = [p for p in glob.glob(os.path.join(RESULTS, "*.json")) if "aggregates" in load(p)]
    assert len(suites) >= 10
    for path in suites:
        saved = load(path)
        again = json.loads(json.dumps(compare.without_inf(
            compare.aggregate(saved["runs"], list(saved["commands"]), saved["peer"]))))
        for system, figures in saved["aggregates"].items():
            assert {k: again[system][k] for k in figures} == figures, (path, system)


@pytest.mark.unit
def test_replots_rebuild_the_published_tables(tmp_path, capsys):
    """The report code of sampling, soak, profile-sac, replay and scaling rebuilds, from each
    saved result, exactly the table it published (sampling's medians over passes included)."""
    sampling = load(os.path.join(RESULTS, "sampling.json"))
    assert json.loads(json.dumps(sampling_report.summarize(sampling))) == sampling["summary"]
    copy = shutil.copy(os.path.join(RESULTS, "sampling.json"), tmp_path)  # --replot rewrites it
    probe.main(["sampling", "--replot", copy])
    assert capsys.readouterr().out.strip() == sampling["markdown"].strip()
    assert os.path.getsize(str(tmp_path / "sampling.png")) > 0

    saved = load(os.path.join(RESULTS, "soak.json"))
    procs, total, store = soak_report.verdicts(saved["samples"], 60 * saved["warmup_minutes"],
                                               saved["threshold"])
    assert json.loads(json.dumps([procs, total, store])) == [
        saved["processes"], saved["total"], saved["object_store"]]
    probe.main(["soak", "--replot", shutil.copy(os.path.join(RESULTS, "soak.json"), tmp_path)])
    assert capsys.readouterr().out.strip() == saved["markdown"].strip()

    for path in glob.glob(os.path.join(RESULTS, "profile-*.json")):
        probe.main(["profile-sac", "--replot", path])
        assert capsys.readouterr().out.strip() == load(path)["markdown"].strip(), path

    replay = load(os.path.join(RESULTS, "replay_throughput.json"))
    assert replay_throughput.markdown(replay["results"]) == replay["table"]

    for name in ("scaling", "scaling-cluster", "scaling-ahead-off"):
        saved = load(os.path.join(RESULTS, f"{name}.json"))
        assert scaling.markdown(saved["points"], saved["step_ms"], saved["seconds"],
                                saved["where"]) == saved["markdown"], name


# -- pure parts ------------------------------------------------------------------------------
@pytest.mark.unit
def test_soak_verdicts():
    """A flat process, one that grows by half, one that starts late; the object store's growth
    under 1 MB is not flagged however large as a fraction."""
    mb = 2 ** 20

    def sample(t, grow, late):
        procs = {"1": dict(title="main.py", rss=100 * mb, anon=50 * mb),
                 "2": dict(title="ray::ParameterServer", rss=grow * mb, anon=grow * mb)}
        if late:
            procs["3"] = dict(title="ray::RolloutWorker", rss=10 * mb, anon=10 * mb)
        return dict(t=t, processes=procs, object_store=dict(used=(1 + t / 100) * mb))

    samples = [sample(t, 100 if t < 60 else 150, t >= 90) for t in range(0, 130, 10)]
    procs, total, store = soak_report.verdicts(samples, 30, 0.10)
    status = {p["pid"]: p["status"] for p in procs}
    assert status == {1: "flat", 2: "GROWS", 3: "started after the warm-up"}
    assert procs[1]["rss"]["growth"] == pytest.approx(0.5)
    assert total["base"] == 200 * mb and total["end"] == 260 * mb  # the late process counts
    assert store["growth"] > 0.10 and not store["flagged"]
    table = soak_report.markdown(dict(minutes=2, interval=10, warmup_minutes=0.5, threshold=0.1,
                                      processes=procs, total=total, object_store=store,
                                      run={}))
    assert "| ray::ParameterServer 2 | 100.0 | 150.0 | 150.0 | +50.0% |" in table
    assert "1 process(es) grew by more than 10%: ray::ParameterServer 2" in table


@pytest.mark.unit
def test_training_windows(tmp_path, capsys):
    """ddrl's windows weight each round's mean return by its episodes; SB3's average its
    rollouts' ep_rew_mean; entropy is SB3's -entropy_loss."""
    ddrl, sb3, out = tmp_path / "metrics.csv", tmp_path / "progress.csv", tmp_path / "w.json"
    ddrl.write_text("env_steps,train_return,episodes,entropy\n"
                    "1000,10,1,1.0\n1500,20,3,0.5\n2500,5,2,\n")
    sb3.write_text("time/total_timesteps,rollout/ep_rew_mean,train/entropy_loss\n"
                   "640,1.0,\n1280,1.5,-1.2\n2560,2.5,-1.0\n")
    probe.main(["training-windows", "--window", "2000", f"ddrl={ddrl}", f"sb3={sb3}",
                "--out", str(out)])
    runs = load(out)["runs"]
    assert runs["ddrl"]["windows"] == {"0": {"train_return": 17.5, "entropy": 0.75},
                                       "2000": {"train_return": 5.0, "entropy": None}}
    assert runs["sb3"]["windows"] == {"0": {"train_return": 1.5, "entropy": 1.2},
                                      "2000": {"train_return": 2.5, "entropy": 1.0}}
    assert capsys.readouterr().out.splitlines() == [  # a window without entropy is not printed
        f"{'ddrl':28s} 0k 17.50 / 0.750", f"{'sb3':28s} 0k 1.50 / 1.200 | 2k 2.50 / 1.000"]
    # DQN: no entropy in either file; SB3's rows every log_interval episodes
    ddrl.write_text("env_steps,train_return,episodes\n1000,10,1\n2500,4,2\n")
    sb3.write_text("time/total_timesteps,rollout/ep_rew_mean\n640,1.0\n1280,2.0\n2560,2.5\n")
    probe.main(["training-windows", "--window", "2000", f"ddrl={ddrl}", f"sb3={sb3}"])
    assert capsys.readouterr().out.splitlines() == [
        f"{'ddrl':28s} 0k 10.00 | 2k 4.00", f"{'sb3':28s} 0k 1.50 | 2k 2.50"]


# -- probes in this process ------------------------------------------------------------------
def test_raw_gym(tmp_path, capsys):
    out = tmp_path / "raw.json"
    probe.main(["raw-gym", "--seconds", "0.02", "--num_envs", "1", "3", "--out", str(out)])
    result = load(out)
    assert result["random_actions_1env_steps_per_s"] > 0
    assert set(result["policy_steps_per_s"]) == {"1", "3"}
    assert min(result["policy_steps_per_s"].values()) > 0
    assert json.loads(capsys.readouterr().out) == result


def test_vector_ppo_floor_and_sample_factorys_log():
    """The floor PPO trains (two rounds of 256 x 32 steps) and reports a rate; Sample Factory's
    log lines give the rate between its first and last frame counts."""
    rate, _ = vector_ppo.floor_ppo(2 * 256 * 32, seed=0)
    assert rate > 0
    log = "\n".join([
        "[2026-11-26 23:13:00,000][1] Fps is (10 sec: nan). Total num frames: 0. Throughput: 0",
        "[2026-11-26 23:13:10,000][1] Fps is (10 sec: 1). Total num frames: 100000. Samples",
        "[2026-11-26 23:13:10,001][1] Avg episode reward: [(0, '57.5')]",
        "[2026-11-26 23:13:20,000][1] Fps is (10 sec: 1). Total num frames: 350000. Samples"])
    assert vector_ppo.sf_throughput(log) == (25_000.0, 57.5)


@pytest.mark.unit
def test_appo_vs_sample_factory_reads_both_systems_returns(tmp_path):
    """Time to a 100-episode training mean of 475 and the rate from Sample Factory's log lines
    and from ddrl's metrics.csv rows (episodes and their mean return per row)."""
    log = "\n".join([
        "[2026-11-27 03:00:00,000][1] Fps is (10 sec: nan). Total num frames: 0. Throughput: 0",
        "[2026-11-27 03:00:05,000][1] Fps is (10 sec: 1). Total num frames: 10000. Samples",
        "[2026-11-27 03:00:05,001][1] Avg episode reward: [(0, '300.5')]",
        "[2026-11-27 03:00:10,000][1] Fps is (10 sec: 1). Total num frames: 60000. Samples",
        "[2026-11-27 03:00:10,001][1] Avg episode reward: [(0, '480.0')]"])
    import datetime
    started = datetime.datetime(2026, 11, 27, 2, 59, 58).timestamp()
    assert appo_vs_sf.sf_report(log, started) == pytest.approx((10_000.0, 12.001, 480.0))
    with open(tmp_path / "metrics.csv", "w") as f:
        f.write("env_steps,wall_time_s,episodes,train_return\n")
        f.write("200,1.0,60,100\n400,2.0,60,500\n600,3.0,,\n800,4.0,50,500\n1000,5.0,0,\n")
    rate, reached, last = appo_vs_sf.ddrl_report(str(tmp_path), 1000)
    # from the row at 20% of the steps (200) to the last; the 100 newest episodes: 60 at 100
    # and 60 at 500 -> 300 (below); then 60 at 500 and 50 at 500 -> 500 at 4.0 s
    assert rate == 200.0 and reached == 4.0 and last == 500.0


def test_sampling_local(tmp_path, capsys):
    """The local worker's grid (one cell above --max_steps_per_round, skipped), the raw loop,
    one collect's cost, the markdown table and the plot."""
    out = str(tmp_path / "sampling")
    probe.main(["sampling", "--configs", "local", "--actor_envs", "0", "--passes", "1",
                "--seconds", "0.02", "--raw_seconds", "0.02", "--num_envs", "1", "2",
                "--rollout_steps", "1", "4", "--max_steps_per_round", "4", "--max_load", "100",
                "--out", out])
    result = load(out + ".json")
    cells = {(c["num_envs_per_worker"], c["rollout_steps"]): c["steps_per_s"]["median"]
             for c in result["summary"]["cells"]}
    assert set(cells) == {(1, 1), (1, 4), (2, 1)} and min(cells.values()) > 0
    assert result["local_collect_1step_1env"]["new_weights_every_call_us"] > 0
    assert result["command"].startswith(".venv/bin/python benchmarks/probe.py sampling ")
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| local worker in the driver"))
    assert row.count("|") == 6 and row.rstrip(" |").endswith("—")  # 2×4 skipped
    assert os.path.getsize(out + ".png") > 0


def test_replay_buffers_of_ddrl():
    """The replay probe's ddrl side (what runs without cpprb): both buffers fill a ring, go
    round again and sample with the priority update."""
    import numpy as np
    rng = np.random.default_rng(0)
    blocks = replay_throughput.random_blocks(rng, 4, 64)
    priorities = [rng.exponential(1.0, 64) for _ in range(4)]
    for prioritized in (False, True):
        adapter = replay_throughput.DdrlAdapter(prioritized, 256, seed=0)
        rates = replay_throughput.measure(adapter, blocks, priorities, 4, 5, 32)
        assert len(rates) == 3 and min(rates) > 0, prioritized
        assert len(adapter.buffer) == 256 and adapter.buffer.total_added == 512


@needs("cpprb")
def test_replay_against_cpprb(tmp_path, capsys):
    out = tmp_path / "replay.json"
    probe.main(["replay", "--capacity", "2048", "--sample_batches", "5", "--repetitions", "1",
                "--out", str(out)])
    report = load(out)
    assert set(report["results"]) == {"ddrl_uniform", "cpprb_uniform", "ddrl_prioritized",
                                      "cpprb_prioritized"}
    assert report["table"] in capsys.readouterr().out


def test_learning_speed(tmp_path, capsys):
    """Every workload's real learning step on the CPU with one thread, a fraction of a second
    each (PPO in both modes): positive figures, samples/s = batch x updates/s, finite losses,
    no update skipped, and in ddrl mode the learner's CPU model and the device model holding
    the same weights after the timed updates (the round trip is real and exact)."""
    from probes import learning_speed
    out = tmp_path / "speed.json"
    probe.main(["learning-speed", "--seconds", "0.3", "--threads", "1", "--warmup", "1",
                "--precisions", "fp32", "--out", str(out)])
    results = load(out)["results"]
    assert [(r["workload"], r["mode"], r["batch"]) for r in results] == [
        ("ppo-atari", "ddrl", 256), ("ppo-atari", "device", 256), ("dqn-atari", "server", 32),
        ("sac-lunar", "server", 256), ("dqn-lunar", "server", 128)]
    for r in results:
        assert (r["device"], r["threads"], r["precision"]) == ("cpu", 1, "fp32")
        assert r["updates"] >= 1 and r["updates_per_s"] > 0 and r["median_update_ms"] > 0
        assert r["samples_per_s"] == pytest.approx(r["batch"] * r["updates_per_s"], abs=0.2)
        assert r["skipped_updates"] == 0 and r["losses"]
        assert all(math.isfinite(v) for v in r["losses"].values()), r
    ddrl = results[0]
    assert ddrl["weights_max_abs_diff"] == 0.0 and ddrl["weights_version"] >= 2
    assert learning_speed.markdown(results) in capsys.readouterr().out


def test_learning_speed_without_cuda(monkeypatch, capsys):
    """CUDA asked where torch has none: the configuration is skipped with its reason in one
    line, no traceback; a mode a workload does not have is a clear error."""
    import torch
    from probes import learning_speed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = learning_speed.measure("dqn-atari", "cuda", seconds=0.1)
    assert result["skipped"].startswith(f"torch {torch.__version__} cannot use CUDA here")
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(ValueError, match="dqn-atari runs the parameter server's update in a "
                                         "mode of server, rounds, graphs"):
        learning_speed.build("dqn-atari", "cpu", mode="ddrl")


def test_learning_speed_server_modes(tmp_path):
    """The parameter server's modes: one update per call, a device round of the preset's 4
    updates per call, and a round with CUDA graphs asked (on the CPU: a round without them)."""
    out = tmp_path / "speed.json"
    probe.main(["learning-speed", "--seconds", "0.2", "--threads", "1", "--warmup", "1",
                "--workloads", "dqn-lunar", "--server_modes", "server", "rounds", "graphs",
                "--out", str(out)])
    results = load(out)["results"]
    assert [(r["mode"], r["updates_per_call"], r["device_rounds"], r["cuda_graphs"])
            for r in results] == [("server", 1, False, False), ("rounds", 4, True, False),
                                  ("graphs", 4, True, False)]
    for r in results:
        assert r["updates"] % r["updates_per_call"] == 0 and r["skipped_updates"] == 0
        assert r["samples_per_s"] == pytest.approx(r["batch"] * r["updates_per_s"], abs=0.2)


def test_update_vs_sb3_ddrl_side(capsys):
    """One measurement of ddrl's side (the child process's mode, in this process): ms per
    update and the share in matrix products."""
    probe.main(["update-vs-sb3", "--one", "ddrl", "1", "--updates", "2"])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["ms_per_update"] > 0 and 0 < figures["matmul_share"] < 1


def test_ppo_parameter_names_map_to_sb3():
    """ppo-update-vs-sb3 maps every parameter of ddrl's Atari PPO model onto SB3's CNN policy;
    a renamed layer in models/ fails here, without SB3."""
    from models.ppo import PPOModel
    from options.options import parse_args
    args = parse_args(["--config", os.path.join(REPO, "configs", "ppo-atari.yaml")])
    env = atari_throughput.make_env_fn("ALE/Breakout-v5", 0)()
    model = PPOModel(args, env.observation_space, env.action_space)
    env.close()
    names = [name for name, _ in model.named_parameters()]
    mapped = {ppo_vs_sb3_update.sb3_name(name) for name in names}
    assert len(mapped) == len(names)
    assert {name.rsplit(".", 1)[0] for name in names} == set(ppo_vs_sb3_update.SB3_NAMES)


# -- tools in processes of their own ---------------------------------------------------------
@pytest.mark.e2e
def test_probe_help_imports_no_heavy_library():
    """probe.py builds its subcommands without torch, Ray, gymnasium or a peer library: -h is
    instant and a missing peer fails only the probe that needs it."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import probe; probe.build_parser(); "
            "print(sorted(m for m in ('torch', 'ray', 'gymnasium', 'stable_baselines3', 'cpprb')"
            " if m in sys.modules))")
    assert run_tool("-c", code).stdout.strip() == "[]"


@pytest.mark.e2e
def test_update_cost(tmp_path, capsys):
    """One configuration of the grid, in its child process."""
    out = tmp_path / "cost.json"
    probe.main(["update-cost", "--updates", "2", "--precisions", "fp32", "--sizes", "32,32",
                "--threads", "1", "--out", str(out)])
    report = load(out)
    (row,) = report["results"]
    assert (row["precision"], row["hidden_sizes"], row["threads"]) == ("fp32", "32,32", 1)
    assert row["ms_per_update"] > 0 and "torch_cpu_capability" in report["cpu"]
    assert "fp32  hidden    32,32  threads 1:" in capsys.readouterr().out


@pytest.mark.e2e
def test_dqn_parts(tmp_path, capsys):
    """Two variants timed in this process: each row's model was built with its flags (the
    probe's figures compare Rainbow's parts, so a flag that did not reach the model would make
    a row a copy of another) and the ratio is against the dqn row."""
    out = tmp_path / "parts.json"
    probe.main(["dqn-parts", "--variants", "dqn", "rainbow", "--updates", "2", "--repeats", "1",
                "--out", str(out)])
    dqn, rainbow = load(out)["results"]
    assert dqn["built"] == {"model": "DQNModel", "dueling": False, "double_q": False,
                            "exploration": "linear", "prioritized_replay": False, "n_step": 1}
    assert rainbow["built"] == {"model": "C51Model", "dueling": True, "double_q": True,
                                "exploration": "noisy", "prioritized_replay": True, "n_step": 3}
    assert dqn["against_dqn"] == 1.0 and rainbow["ms_per_update"] > 0
    assert abs(rainbow["against_dqn"] - rainbow["ms_per_update"] / dqn["ms_per_update"]) < 0.01
    assert "rainbow" in capsys.readouterr().out


@pytest.mark.e2e
def test_update_profile(tmp_path, capsys):
    """The profile of a few TD3+BC updates built with the flags given: the groups' shares add
    up to the whole, and the matrix products are the operators that do the networks' work."""
    out = tmp_path / "profile.json"
    probe.main(["update-profile", "--model_name", "td3_bc", "--gym_id", "Pendulum-v1",
                "--updates", "4", "--repeats", "1", "--out", str(out),
                "--flags", "--td3_hidden_sizes", "16,16", "--batch_size", "32"])
    report = load(out)
    assert (report["model"], report["batch_size"]) == ("TD3BCModel", 32)
    shares = report["share_by_group"]
    assert set(shares) <= {"matrix products", "optimizer", "other"}
    assert shares["matrix products"] > 0 and abs(sum(shares.values()) - 1.0) < 0.01
    mm = {r["operator"]: r for r in report["top_operators"] if r["group"] == "matrix products"}
    # 3 linear layers each: critic twice, target critic twice, target actor, and on every
    # second update the actor and Q1 for its loss (TD3's delay of 2): 18 forward products
    assert mm["aten::addmm"]["calls_per_update"] == 18.0
    assert report["ms_per_update"] > 0 and "TD3BCModel on Pendulum-v1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--out after --flags would go to ddrl"):
        probe.main(["update-profile", "--flags", "--batch_size", "32", "--out", str(out)])


@pytest.mark.e2e
def test_atari_throughput_raw(tmp_path):
    """The env chain alone in its child process: two rounds, so the steady rate exists."""
    out = tmp_path / "atari.json"
    probe.main(["atari-throughput", "--steps", "2048", "--systems", "raw", "--out", str(out)])
    raw = load(out)["results"]["raw"]
    assert raw["env_steps"] == 2048 and len(raw["marks"]) == 2
    assert raw["steady_frames_per_s"] > 0 and raw["whole_frames_per_s"] > 0


FAKE_SYSTEM = """import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--run_dir"); p.add_argument("--seed", type=int); p.add_argument("--t", type=float)
a = p.parse_args()
t = a.t + a.seed
with open(os.path.join(a.run_dir, "summary.json"), "w") as f:
    json.dump(dict(env_steps=1000, wall_time_s=t, best_eval_return=500.0, last_eval_return=500.0,
                   stopped_because="target_return", target_reached=True, time_to_target_s=t,
                   steps_to_target=1000 * (1 + a.seed), system="fake"), f)
with open(os.path.join(a.run_dir, "eval.csv"), "w") as f:
    f.write(f"env_steps,wall_time_s,eval_return\\n1000,{t},500.0\\n")
"""


@pytest.mark.e2e
def test_compare_harness(tmp_path):
    """Three ad-hoc systems, two seeds, alternating: the ratios against the peer, a failure
    counted as not reached (∞), the JSON, the plot and the table."""
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_SYSTEM)
    results = tmp_path / "results"
    run = "{python} " + str(fake) + " --run_dir {run_dir} --seed {seed} --t "
    proc = run_tool("benchmarks/compare.py", "--suite", "cartpole", "--seeds", "0", "1",
                    "--systems", "sb3", "mine", "broken", "--system", f"sb3={run}4",
                    "--system", f"mine={run}2", "--system",
                    "broken={python} -c 'import sys; sys.exit(3)'", "--results_dir", str(results))
    saved = load(results / "cartpole.json")
    mine, broken = saved["aggregates"]["mine"], saved["aggregates"]["broken"]
    assert mine["reached"] == 2 and mine["time_to_target_s"]["median"] == 2.5
    assert mine["time_to_target_s_ratio_vs_peer"] == pytest.approx(2.5 / 4.5)
    assert broken["reached"] == 0 and broken["time_to_target_s"]["median"] is None
    assert "| mine | 2/2 | 2.5 [2.0, 3.0] | 1,500 [1,000, 2,000] | 0.56 | 1.00 |" in proc.stdout
    assert "| broken | 0/2 | ∞ [∞, ∞] |" in proc.stdout
    assert os.path.getsize(results / "cartpole.png") > 0


@pytest.mark.e2e
def test_sampling_through_ray(tmp_path):
    """The Ray configurations (the one probe here that starts Ray): 1 Ray worker, its envs in
    one env actor each and in one host actor, each measured and in the tables."""
    out = str(tmp_path / "sampling")
    proc = run_tool("benchmarks/probe.py", "sampling", "--configs", "ray-1", "--num_envs", "2",
                    "--rollout_steps", "4", "--actor_envs", "2", "--actor_rollout_steps", "4",
                    "--passes", "1", "--seconds", "0.05", "--raw_seconds", "0.02",
                    "--settle", "0", "--max_load", "100", "--out", out)
    result = load(out + ".json")
    measured = {(c["config"], c["env_placement"]): c["steps_per_s"]["median"]
                for c in result["summary"]["cells"]}
    assert set(measured) == {("ray-1", "worker"), ("ray-1-env-actors", "actor"),
                             ("ray-1-env-host", "actor")}
    assert min(measured.values()) > 0
    for row in ("| 1 Ray worker |", "| `actor` (one actor per env) |",
                "| `actor --envs_per_actor 2` (one actor hosting all) |"):
        assert row in proc.stdout, row


# -- with a peer library ---------------------------------------------------------------------
@pytest.mark.e2e
@needs("stable_baselines3")
def test_update_vs_sb3(tmp_path):
    out = tmp_path / "vs.json"
    proc = run_tool("benchmarks/probe.py", "update-vs-sb3", "--updates", "2", "--repeats", "1",
                    "--threads", "1", "--out", str(out))
    assert re.search(r"threads 1: ddrl / sb3 = \d+\.\d\d", proc.stdout)
    assert {r["system"] for r in load(out)["results"]} == {"ddrl", "sb3"}


@pytest.mark.e2e
@needs("stable_baselines3")
def test_ppo_update_vs_sb3():
    """Float32 rounding, not a different computation: the weights after one update agree."""
    proc = run_tool("benchmarks/probe.py", "ppo-update-vs-sb3")
    worst = float(re.search(r"parameters differ by at most (\S+)", proc.stdout).group(1))
    assert worst < 1e-5, proc.stdout


@pytest.mark.e2e
@needs("stable_baselines3")
@pytest.mark.parametrize("script, env", [("sb3_ppo.py", "CartPole-v1"),
                                         ("sb3_sac.py", "Pendulum-v1")])
def test_sb3_peer_runs(tmp_path, script, env):
    # (a target out of reach: an untrained CartPole policy can score 500 in its one episode)
    run_tool(f"benchmarks/{script}", "--env", env, "--seed", "0", "--max_steps", "400",
             "--eval_freq", "200", "--eval_episodes", "1", "--target_return", "1e9",
             "--out_dir", str(tmp_path))
    summary = load(tmp_path / "summary.json")
    assert summary["env_steps"] >= 400 and summary["system"]
    with open(tmp_path / "eval.csv") as f:
        assert len(list(csv.DictReader(f))) >= 1


@pytest.mark.e2e
@pytest.mark.skipif(profile_sac.py_spy() is None, reason="py-spy is not installed "
                                                         "(benchmarks/requirements.txt)")
def test_profile_sac(tmp_path):
    out = tmp_path / "profile.json"
    run_tool("benchmarks/probe.py", "profile-sac", "--flags",
             "--num_workers 0 --learning_starts 100 --start_steps 100 --log_steps 64",
             "--skip_updates", "20",
             "--seconds", "3", "--run_dir", str(tmp_path / "run"), "--out", str(out))
    data = load(out)
    assert data["updates_per_s"] > 0 and data["processes"]
    assert data["breakdown"]["driver (main.py)"]["samples"] > 0


# -- slow: DDRL_SLOW_PROBES=1 ----------------------------------------------------------------
@pytest.mark.e2e
@slow
def test_overheads(tmp_path):
    out = tmp_path / "overheads.json"
    run_tool("benchmarks/probe.py", "overheads", "--calls", "3", "--out", str(out))
    figures = load(out)
    for key in ("empty_call_one_actor_ms", "empty_call_two_actors_ms", "ray_put_weights_ms",
                "weights_by_put_two_actors_ms", "weights_inline_two_actors_ms",
                "compiled_graph_two_actors_ms", "adam_default_step_ms", "adam_fused_step_ms"):
        assert figures[key] > 0, key
    assert figures["command"] == f"benchmarks/probe.py overheads --calls 3 --out {out}"


@pytest.mark.e2e
@slow
def test_soak(tmp_path):
    out = tmp_path / "soak.json"
    run_tool("benchmarks/probe.py", "soak", "--minutes", "0.3", "--interval", "3",
             "--warmup_minutes", "0.1", "--out", str(out), "--flags",
             "--model_name sac --gym_id Pendulum-v1 --num_workers 1 --utd_ratio 1 "
             "--buffer_size 500")
    data = load(out)
    titles = {p["name"].rsplit(" ", 1)[0] for p in data["processes"]}
    assert {"main.py", "ray::ParameterServer", "gcs_server", "raylet"} <= titles
    assert data["total"]["end"] > 0 and "used" in data["samples"][-1]["object_store"]


@pytest.mark.e2e
@slow
def test_sweep_time(tmp_path):
    out = tmp_path / "sweep.json"
    run_tool("benchmarks/probe.py", "sweep-time", "--num_samples", "2", "--total_steps", "2000",
             "--work_dir", str(tmp_path / "work"), "--out", str(out), timeout=900)
    result = load(out)
    assert {result["sweeps"][s]["trials"] for s in ("asha", "fifo")} == {2}
    assert result["sequential"]["env_steps"] > 0 and result["sequential"]["returncodes"] == [0, 0]
    assert result["reproduce"]["rerun_returncode"] == 0


@pytest.mark.e2e
@slow
def test_offline_shards(tmp_path):
    out = tmp_path / "shards.json"
    proc = run_tool("benchmarks/probe.py", "offline-shards", "--rows", "4000", "--updates",
                    "40", "--out", str(out), timeout=600)
    rows = {row["layout"]: row for row in load(out)["rows"]}
    assert set(rows) == {"one buffer", "sharded"}
    assert "ray::ReplayBuffer" in rows["one buffer"]["peak_rss_mb"]
    assert "ray::ReplayBuffer" not in rows["sharded"]["peak_rss_mb"]  # the learners hold it
    assert all(row["updates_per_s"] > 0 for row in rows.values())
    assert "| sharded |" in proc.stdout


@pytest.mark.e2e
@slow
def test_scaling_point(tmp_path):
    out = tmp_path / "scaling.json"
    proc = run_tool("benchmarks/scaling.py", "--systems", "ppo", "--placements", "worker",
                    "--workers", "1", "--seconds", "20", "--cooldown", "0", "--out", str(out),
                    timeout=600)
    (point,) = load(out)["points"]
    assert point["steps_per_s"] > 0 and "| ppo, N workers x 1 env |" in proc.stdout


@pytest.mark.e2e
@slow
def test_atari_throughput_ddrl(tmp_path):
    out = tmp_path / "atari.json"
    probe.main(["atari-throughput", "--steps", "2048", "--systems", "ddrl-0workers-1thread",
                "--out", str(out)])
    ddrl = load(out)["results"]["ddrl-0workers-1thread"]
    assert ddrl["env_steps"] == 2048 and math.isfinite(ddrl["steady_frames_per_s"])


def test_learning_speed_compare_modes():
    """The check the GPU run makes of its CUDA graphs, on the CPU: one update at a time and a
    device round end on the same DQN weights."""
    from probes import learning_speed
    result = learning_speed.compare_modes("dqn-lunar", "cpu", updates=8,
                                          modes=("server", "rounds"))
    assert result["updates"] == 8
    assert result["weights_max_abs_diff"] < 1e-6 < result["weights_max_abs"]


@pytest.mark.unit
def test_a_window_is_reached_only_once_every_worker_is_up():
    """scaling.py --window: the rows of PPO's elastic start (1 worker, in the driver) for 9 s,
    then both Ray workers; with no warm-up the stand-in's rows alone would span 8 s. A dry run
    of the GPU check was stopped that way at 10.7 s, before its window had two rows."""
    rows = [{"wall_time_s": t, "env_steps": 128 * t, "workers": 1} for t in range(1, 10)]
    assert not scaling.window_reached(rows, 2, 60, 0.0, 6)
    rows += [{"wall_time_s": t, "env_steps": 128 * t, "workers": 2} for t in range(10, 16)]
    assert not scaling.window_reached(rows, 2, 60, 0.0, 6)  # 10 to 15 s: 5 s
    rows.append({"wall_time_s": 16, "env_steps": 128 * 16, "workers": 2})
    assert scaling.window_reached(rows, 2, 60, 0.0, 6)


@pytest.mark.contract
def test_the_rainbow_preset_is_the_suites_rainbow():
    """configs/rainbow-LunarLander-v3.yaml ships what compare.py's lunar-rainbow suite measured:
    the same flags, but for the seed, run directory and the ones the harness sets per run."""
    import shlex
    from options.options import parse_args
    filled = dict(python="python", seed="0", run_dir="r", target="200", max_steps="200000")
    suite = shlex.split(compare.SUITES["lunar-rainbow"]["systems"]["rainbow"].format(**filled))
    measured = vars(parse_args([*suite[2:], "--config", "none"]))
    preset = vars(parse_args(["--config", "rainbow-LunarLander-v3", "--seed", "0",
                              "--run_dir", "r"]))
    differ = {k: (measured[k], preset.get(k)) for k in measured
              if k not in ("config",) and measured[k] != preset.get(k)}
    assert not differ, differ


@pytest.mark.contract
def test_the_deep_sea_suite_gives_both_systems_every_setting_alike():
    """deepsea-rnd's ppo and ppo_rnd differ in the model (and the agent it brings) alone: every
    flag both have is resolved to the same value, and ppo_rnd's own flags are its defaults."""
    import shlex
    from options.options import parse_args
    filled = dict(python="python", seed="0", run_dir="r", target="0.9", max_steps="300000")
    resolved = {}
    for name, template in compare.SUITES["deepsea-rnd"]["systems"].items():
        argv = shlex.split(template.format(**filled))[2:]
        resolved[name] = vars(parse_args(argv))
    ppo, rnd = resolved["ppo"], resolved["ppo_rnd"]
    assert (ppo["model_name"], rnd["model_name"]) == ("ppo", "ppo_rnd")
    assert (ppo["agent_name"], rnd["agent_name"]) == ("default_agent", "rnd_agent")
    differ = {k: (ppo[k], rnd[k]) for k in ppo.keys() & rnd.keys()
              if k not in ("model_name", "agent_name") and ppo[k] != rnd[k]}
    assert not differ, differ
    assert rnd["gym_kwargs"] == ("size=20",) and not rnd["normalize_obs"]
