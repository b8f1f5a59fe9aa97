"""Env steps/s of the asynchronous loop (APPO) against the synchronous one (PPO) on a slow,
uneven simulator, at several worker counts.

    .venv/bin/python benchmarks/probe.py async-vs-sync --workers 8 16 \\
        --out benchmarks/results/async-vs-sync.json

The env (benchmarks/plugins/slow_env.py): CartPole-v1 whose steps wait a lognormal time of mean --step_ms
(default 5 ms, sigma 1: heavy-tailed), whose resets wait 100 ms one time in 10, and whose
rollout worker 0 is 4x slower than the others; 4 envs per worker, fragments of 32 steps.

- ``ppo-sync``: ddrl's PPO loop at its best settings for this: --sample_ahead on (each worker
  samples its next fragment while the learner works), elastic start.
- ``appo``: ddrl's asynchronous loop (--model_name appo), 2 fragments queued per worker.

Both learn on batches of a quarter of what all workers' fragments hold (PPO: 4 minibatches per
round; APPO: an update per that many samples), 4 epochs each, the same network (64x64 tanh
actor and critic), lr, gamma and --total_steps; each run
is a process of its own, one after another, alternating per repeat. Reported: env steps/s
from the row where 20 % of the steps were done to the last (the loop at speed: no interpreter
start, Ray start or warm-up), the whole process's wall time, and the ratio appo / ppo-sync.
"""
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from probes import REPO, command, git_commit

SYSTEMS = ("ppo-sync", "appo")
ENV = ("--user_dir", "benchmarks/plugins", "--env_name", "slow_env", "--gym_id", "CartPole-v1", "--step_sigma", "1.0",
       "--slow_reset_ms", "100", "--slow_reset_prob", "0.1", "--slow_workers", "0",
       "--slow_factor", "4")


def add_args(p):
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--workers", nargs="+", type=int, default=[8, 16])
    p.add_argument("--step_ms", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=40_000, help="env steps per run")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the results as JSON here")


def argv(system, workers, step_ms, steps, seed, run_dir):
    envs, rollout = 4, 32
    common = [sys.executable, os.path.join(REPO, "main.py"), *ENV, "--step_ms", str(step_ms),
              "--num_workers", str(workers), "--num_envs_per_worker", str(envs),
              "--rollout_steps", str(rollout), "--total_steps", str(steps),
              "--eval_interval", str(10 * steps), "--target_return", "none", "--seed", str(seed),
              "--run_dir", run_dir, "--quiet"]
    round_samples = workers * envs * rollout
    if system == "ppo-sync":
        return common + ["--sample_ahead", "on", "--num_epochs", "4",
                         "--batch_size", str(round_samples // 4)]
    return common + ["--model_name", "appo", "--num_epochs", "4",
                     "--batch_size", str(round_samples // 4)]


def throughput(run_dir, steps):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["env_steps"]]
    start = next((r for r in rows if int(r["env_steps"]) >= 0.2 * steps), rows[0])
    last = rows[-1]
    return ((int(last["env_steps"]) - int(start["env_steps"]))
            / (float(last["wall_time_s"]) - float(start["wall_time_s"])))


def run(args, argv_):
    results = []
    for repeat in range(args.repeats):
        for workers in args.workers:
            systems = args.systems if repeat % 2 == 0 else list(reversed(args.systems))
            for system in systems:
                with tempfile.TemporaryDirectory() as tmp:
                    run_dir = os.path.join(tmp, "run")
                    start = time.perf_counter()
                    subprocess.run(argv(system, workers, args.step_ms, args.steps, args.seed,
                                        run_dir), cwd=REPO, check=True,
                                   stdout=subprocess.DEVNULL)
                    wall = time.perf_counter() - start
                    rate = throughput(run_dir, args.steps)
                row = {"system": system, "workers": workers, "repeat": repeat,
                       "steps_per_s": rate, "wall_s": wall}
                print(json.dumps(row), flush=True)
                results.append(row)
    summary = {}
    for workers in args.workers:
        rates = {s: statistics.median(r["steps_per_s"] for r in results
                                      if r["system"] == s and r["workers"] == workers)
                 for s in args.systems}
        summary[str(workers)] = {**rates, **({"appo_over_sync": rates["appo"] / rates["ppo-sync"]}
                                             if len(rates) == 2 else {})}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": command(argv_), "commit": git_commit(),
                       "machine": platform.processor() or platform.machine(),
                       "settings": {"env": " ".join(ENV), "step_ms": args.step_ms,
                                    "steps": args.steps},
                       "runs": results, "summary": summary}, f, indent=1)
