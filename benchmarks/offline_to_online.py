"""Offline to online (issue 49): IQL trained on a dataset, then fine-tuned online with the
dataset kept in its batches, against SAC from scratch at the same online env steps.

    .venv/bin/python benchmarks/offline_to_online.py --dataset data/halfcheetah-medium-v0 \
        --gym_id HalfCheetah-v5 --seeds 0 1 2 --offline_updates 30000 --online_steps 50000 \
        --eval_interval 5000 --eval_episodes 5 --name halfcheetah-medium-iql

Per seed, three ddrl runs (main.py, one process each: --num_workers 0, one learner thread):

1. **offline**: ``--model_name iql --dataset D --offline_ratio 1`` for --offline_updates gradient
   updates (the step clock counts updates), d3rlpy's IQL defaults, ``--reward_scale auto`` (the
   paper's locomotion recipe) and ``--normalize_obs`` (the dataset's statistics, frozen);
2. **online**: ``--restore`` that run with ``--offline_ratio`` (0.5: half of each batch from the
   dataset), as a new run from the offline weights, optimizer and update count, for
   --online_steps env steps; actions from the policy from the first step (``--start_steps 0``),
   updates from ``--learning_starts`` online transitions on;
3. **scratch**: ``--model_name sac`` on the env, ddrl's preset for it (configs/sac-mujoco.yaml on
   the MuJoCo ids: SB3's SAC with a 10k-step random warm-up) in fp32 as IQL, for the same
   --online_steps.

Every run evaluates --eval_episodes deterministic episodes every --eval_interval steps (updates
in the offline run) on the same reset seeds (core/seeding.py) and at its end. --parallel runs
that many seeds at once (returns do not depend on it: every budget is in steps or updates).

Writes benchmarks/results/offline-to-online-<name>.json (every run's curve, its command, the
CPU's flags, the commit) and a markdown table: per system the final eval return, its mean over
seeds with a 95% stratified-bootstrap interval (ddrl/stats.py), and each seed's value;
and the online curves side by side at every evaluation point. ``--from_json PATH`` (alone)
writes the tables again from a saved report.
"""
import argparse
import concurrent.futures
import csv
import json
import os
import sys
import time

import numpy as np

from offline import REPO, RESULTS, cpu_flags, git_commit, interval, run_process, write

RUNS = os.path.join(REPO, "benchmarks", "runs")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from_json", default=None, metavar="PATH",
                   help="write the tables of a saved report again; runs nothing")
    p.add_argument("--dataset", help="a Minari dataset's directory (or an id)")
    p.add_argument("--gym_id", help="the env the dataset was recorded on")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--offline_updates", type=int, default=30_000)
    p.add_argument("--online_steps", type=int, default=50_000)
    p.add_argument("--offline_ratio", type=float, default=0.5,
                   help="share of each online batch drawn from the dataset")
    p.add_argument("--learning_starts", type=int, default=1000,
                   help="online transitions before the fine-tuning's first update")
    p.add_argument("--eval_interval", type=int, default=5000)
    p.add_argument("--eval_episodes", type=int, default=5)
    p.add_argument("--parallel", type=int, default=1, help="seeds run at once")
    p.add_argument("--name", help="the results' name")
    p.add_argument("--out", default=None, help="the JSON (default: benchmarks/results/"
                                               "offline-to-online-NAME.json)")
    p.add_argument("--timeout", type=float, default=0, help="seconds per run (0: none)")
    args = p.parse_args(argv)
    missing = [f"--{k}" for k in ("dataset", "gym_id", "name") if getattr(args, k) is None]
    if missing and not args.from_json:
        p.error(f"{', '.join(missing)} required (or --from_json PATH)")
    if not 0.0 < args.offline_ratio < 1.0:
        p.error(f"--offline_ratio {args.offline_ratio}: the online phase needs a share of the "
                f"batch from each side, strictly between 0 and 1")
    return args


def commands(args, seed, runs):
    """{phase: (argv, run_dir)} for one seed."""
    main = [sys.executable, "main.py"]
    common = ["--seed", str(seed), "--eval_interval", str(args.eval_interval), "--eval_episodes",
              str(args.eval_episodes), "--target_return", "none", "--learner_threads", "1",
              "--num_workers", "0", "--quiet", "--no-tensorboard", "--no-plots"]
    offline = os.path.join(runs, f"iql-offline-s{seed}")
    online = os.path.join(runs, f"iql-online-s{seed}")
    scratch = os.path.join(runs, f"sac-scratch-s{seed}")
    return {
        "offline": (main + ["--model_name", "iql", "--gym_id", args.gym_id, "--dataset",
                            args.dataset, "--offline_ratio", "1", "--total_steps",
                            str(args.offline_updates), "--reward_scale", "auto",
                            "--normalize_obs", "--config", "none", "--run_dir", offline]
                    + common, offline),
        "online": (main + ["--restore", offline, "--offline_ratio", str(args.offline_ratio),
                           "--total_steps", str(args.online_steps), "--start_steps", "0",
                           "--learning_starts", str(args.learning_starts), "--run_dir", online]
                   + common, online),
        "scratch": (main + ["--model_name", "sac", "--gym_id", args.gym_id, "--total_steps",
                            str(args.online_steps), "--sac_precision", "fp32", "--run_dir", scratch]
                    + common, scratch),
    }


def evaluations(run_dir):
    """[(step, eval return)] from the run's metrics.csv, and summary.json's last evaluation
    (the one at the budget's end may come after the last row)."""
    points = []
    path = os.path.join(run_dir, "metrics.csv")
    if os.path.exists(path):
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("eval_return"):
                    points.append((int(row["env_steps"]), float(row["eval_return"])))
    summary = {}
    if os.path.exists(os.path.join(run_dir, "summary.json")):
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    return points, summary


def run_seed(args, seed, runs):
    """The three runs of one seed, one after another (online needs offline's checkpoint)."""
    found = {}
    for phase, (argv, run_dir) in commands(args, seed, runs).items():
        if phase == "online" and found["offline"]["exit"] != 0:
            found[phase] = {"exit": "skipped: the offline run failed"}
            continue
        code, wall, load = run_process(argv, run_dir + "-logs", args.timeout)
        points, summary = evaluations(run_dir)
        found[phase] = {"exit": code, "wall_s": wall, "load_before": load,
                        "command": argv[1:], "curve": points,
                        "final": summary.get("last_eval_return"),
                        "best": summary.get("best_eval_return"),
                        "steps": summary.get("env_steps")}
        print(f"offline_to_online.py: seed {seed} {phase}: exit {code}, final "
              f"{found[phase]['final']}, {wall:.0f} s", flush=True)
    return found


def table(report):
    runs = report["runs"]
    seeds = sorted(runs, key=int)
    lines = ["| run | what | final eval return, mean [95% CI] | per seed |",
             "| --- | --- | --- | --- |"]
    what = {"offline": f"IQL, {report['args']['offline_updates']:,} updates on the dataset",
            "online": f"that IQL, then {report['args']['online_steps']:,} env steps online "
                      f"(offline_ratio {report['args']['offline_ratio']})",
            "scratch": f"SAC from scratch, {report['args']['online_steps']:,} env steps"}
    for phase in ("offline", "online", "scratch"):
        finals = [runs[s][phase].get("final") for s in seeds]
        if any(f is None for f in finals):
            cell = "- (a run failed)"
        else:
            mean, lo, hi = interval(finals)
            cell = f"{mean:,.1f} [{lo:,.1f}, {hi:,.1f}]"
        per_seed = ", ".join("-" if f is None else f"{f:,.1f}" for f in finals)
        lines.append(f"| {phase} | {what[phase]} | {cell} | {per_seed} |")
    lines += ["", "| online env steps | " + " | ".join(
        f"fine-tuned s{s} | scratch s{s}" for s in seeds) + " |",
        "| ---: | " + " | ".join("---: | ---:" for _ in seeds) + " |"]
    # An evaluation comes at the first step booked at or past each multiple of the interval
    # (a few steps past it, differently per loop): rows are the multiples.
    every = report["args"]["eval_interval"]

    def by_point(curve):
        return {step // every * every: value for step, value in curve}
    curves = {(s, phase): by_point(runs[s][phase].get("curve", []))
              for s in seeds for phase in ("online", "scratch")}
    for point in sorted({p for curve in curves.values() for p in curve}):
        cells = [curves[s, phase].get(point) for s in seeds for phase in ("online", "scratch")]
        lines.append(f"| {point:,} | " + " | ".join(
            "" if v is None else f"{v:,.0f}" for v in cells) + " |")
    return "\n".join(lines)


def save(report, path):
    """The report's tables made from its runs, written beside it (.md) and printed."""
    report["table"] = table(report)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write(report, path)
    with open(path[:-5] + ".md", "w") as f:
        f.write(report["table"] + "\n")
    print(report["table"])


def main(argv=None):
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            save(json.load(f), args.from_json)
        return 0
    runs = os.path.join(RUNS, f"offline-to-online-{args.name}")
    os.makedirs(runs, exist_ok=True)
    report = {"name": args.name, "args": vars(args), "machine": cpu_flags(),
              "commit": git_commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": {}}
    with concurrent.futures.ThreadPoolExecutor(max(1, args.parallel)) as pool:
        futures = {seed: pool.submit(run_seed, args, seed, runs) for seed in args.seeds}
        for seed, future in futures.items():
            report["runs"][str(seed)] = future.result()
    out = args.out or os.path.join(RESULTS, f"offline-to-online-{args.name}.json")
    save(report, out)
    print(f"offline_to_online.py: wrote {out}")
    finals = [report["runs"][str(s)][p].get("final") for s in args.seeds
              for p in ("offline", "online", "scratch")]
    return 0 if all(np.isfinite(f) for f in finals if f is not None) else 1


if __name__ == "__main__":
    sys.exit(main())
