"""An offline run's dataset in one replay buffer actor against spread over its learners
(--shard_dataset): updates/s and the peak memory of each process, on a Minari dataset this
probe writes (random rows of HalfCheetah's shapes by default, 1,000 episodes; no env:
--env_name none, so nothing but the learning runs).

    .venv/bin/python benchmarks/probe.py offline-shards          # 1M rows, IQL 256x256, 2 learners, allreduce
    .venv/bin/python benchmarks/probe.py offline-shards --rows 20000 --updates 400 --out /tmp/shards.json

Each layout is one ``main.py --env_name none --model_name iql --dataset FILE --num_workers 1
--num_learners N --learner_sync SYNC [--shard_dataset] --total_steps UPDATES`` (one torch
thread per process), one after the other. Every --interval seconds the probe reads the RSS
(VmRSS of /proc/PID/status) of main.py and every process under it (the Ray actors: ray::
ReplayBuffer, ray::ParameterServer, ray::LearnerWorker, ...); the table gives each title's
peak (the largest of its processes) and the peak of the sum over the run's processes. Updates/s:
the median of metrics.csv's rows but the first (start-up and the dataset's reading).

Writes --out (default benchmarks/results/offline-shards.json: the rows, the command lines, the
machine) and prints the table.
"""
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

from probes import REPO
from probes.procfs import memory_of, title_of

LAYOUTS = {"one buffer": [], "sharded": ["--shard_dataset"]}


def add_args(p):
    p.add_argument("--rows", type=int, default=1_000_000, help="dataset rows (default: 1M)")
    p.add_argument("--obs_dim", type=int, default=17, help="observation size (default: 17)")
    p.add_argument("--action_dim", type=int, default=6, help="action size (default: 6)")
    p.add_argument("--updates", type=int, default=2000, help="updates per run (default: 2000)")
    p.add_argument("--learners", type=int, default=2, help="--num_learners (default: 2)")
    p.add_argument("--sync", choices=["allreduce", "server"], default="allreduce",
                   help="--learner_sync (default: allreduce)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                 "offline-shards.json"))


def write_dataset(path, rows, obs_dim, action_dim, seed=0, envs=1000):
    """A Minari dataset of random rows: ``envs`` episodes stepped side by side, each
    truncated after rows / envs steps; actions in [-1, 1]."""
    import gymnasium as gym

    from core.data import DatasetWriter
    rng = np.random.default_rng(seed)
    observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    steps = max(1, rows // envs)
    with DatasetWriter(path, observation_space, action_space, algorithm_name="random rows",
                       num_envs=envs) as writer:
        obs = rng.standard_normal((envs, obs_dim), np.float32)
        for t in range(steps):
            following = rng.standard_normal((envs, obs_dim), np.float32)
            writer.add_steps(obs, rng.uniform(-1, 1, (envs, action_dim)).astype(np.float32),
                             rng.standard_normal(envs).astype(np.float32),
                             np.zeros(envs, bool), np.full(envs, t == steps - 1), following)
            obs = following


def descendants(pid):
    """The pids under ``pid`` (children, theirs, ...), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def run_layout(name, flags, dataset, args, work):
    run_dir = os.path.join(work, name.replace(" ", "-"))
    argv = [sys.executable, "main.py", "--env_name", "none", "--model_name", "iql",
            "--dataset", dataset, "--config", "none", "--num_workers", "1",
            "--num_learners", str(args.learners), "--learner_sync", args.sync, *flags,
            "--total_steps", str(args.updates), "--log_steps", str(max(1, args.updates // 10)),
            "--checkpoint_interval", str(10 * args.updates), "--learner_threads", "1",
            "--torch_threads", "1", "--logger", "csv", "--no-plots", "--quiet",
            "--run_dir", run_dir]
    peaks, total_peak = {}, 0
    with open(run_dir + ".log", "w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            total = 0
            for pid in [proc.pid, *descendants(proc.pid)]:
                memory, title = memory_of(pid), title_of(pid)
                if memory is None or title is None:
                    continue
                total += memory["rss"]
                peaks[title] = max(peaks.get(title, 0), memory["rss"])
            total_peak = max(total_peak, total)
            time.sleep(args.interval)
    if proc.returncode != 0:
        with open(run_dir + ".log") as f:
            raise SystemExit(f"{name}: main.py exited {proc.returncode}:\n{f.read()[-3000:]}")
    import csv
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rates = [float(r["updates_per_s"]) for r in csv.DictReader(f)][1:]
    return {"layout": name, "updates_per_s": float(np.median(rates)) if rates else None,
            "peak_rss_mb": {k: round(v / 2**20, 1) for k, v in sorted(peaks.items())},
            "peak_total_rss_mb": round(total_peak / 2**20, 1),
            "command": shlex.join(["main.py", *argv[2:]])}


def table(rows):
    titles = ["main.py", "ray::ReplayBuffer", "ray::ParameterServer", "ray::LearnerWorker"]
    lines = ["| layout | updates/s | " + " | ".join(f"peak RSS {t} (MB)" for t in titles)
             + " | peak RSS, all (MB) |",
             "| --- | ---: | " + " | ".join("---:" for _ in titles) + " | ---: |"]
    for row in rows:
        rate = row["updates_per_s"]
        cells = [str(row["peak_rss_mb"].get(t, "-")) for t in titles]
        lines.append(f"| {row['layout']} | {'-' if rate is None else f'{rate:.1f}'} | "
                     + " | ".join(cells) + f" | {row['peak_total_rss_mb']} |")
    return "\n".join(lines)


def dataset_bytes(directory):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory)
               for f in files)


def run(args, argv):
    work = tempfile.mkdtemp(prefix="ddrl-shards-")
    dataset = os.path.join(work, "random-rows-v0")
    write_dataset(dataset, args.rows, args.obs_dim, args.action_dim)
    rows = [run_layout(name, flags, dataset, args, work) for name, flags in LAYOUTS.items()]
    flags = sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags")
                    for f in line.split()[2:] if f in ("avx2", "avx512f", "avx512_bf16",
                                                       "amx_bf16")})
    result = {"rows": rows, "dataset": {"rows": args.rows, "obs_dim": args.obs_dim,
                                        "action_dim": args.action_dim,
                                        "bytes": dataset_bytes(dataset)},
              "command": shlex.join(["benchmarks/probe.py", "offline-shards", *argv[1:]]),
              "cpu_flags": flags, "machine": platform.processor() or platform.machine()}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(table(rows))
    return 0
