"""A sweep's wall time against the same trials run one after another (the shell loop it replaces).

    .venv/bin/python benchmarks/probe.py sweep-time --out benchmarks/results/sweep_time.json

1. The README's sweep: PPO's lr and clip range on CartPole-v1 (configs/sweeps/ppo-cartpole.yaml),
   8 trials, ASHA, 2 at a time, trials in one process each (--num_workers 0), 50k env steps at
   most, stopping at eval 475.
2. The same sweep with --scheduler fifo (every trial to its end, 2 at a time): parallelism alone.
3. The 8 configurations the sweep drew, each as its own main.py run, one after another, to the
   end (what a shell loop over them does).
4. The best trial's configuration again, `main.py --config best.yaml`: does it reproduce?

Wall times are from launching each command to its exit (Ray's start and shutdown included).
--total_steps (default 50000, the figures' budget) only makes a quick check possible.
"""
import csv
import json
import os
import subprocess
import sys
import time

from probes import REPO

SPEC = os.path.join(REPO, "configs", "sweeps", "ppo-cartpole.yaml")


def base_flags(total_steps):
    """The flags of every trial and run: PPO on CartPole-v1 in one process each."""
    return ["--gym_id", "CartPole-v1", "--num_workers", "0", "--total_steps", str(total_steps)]


def sweep_flags(base, scheduler, num_samples, sweep_dir):
    """The sweep: SPEC's trials, 2 at a time, under this scheduler."""
    return base + ["--tune", SPEC, "--num_samples", str(num_samples), "--max_concurrent", "2",
                   "--scheduler", scheduler, "--run_dir", sweep_dir]


def trial_flags(base, lr, clip_range, run_dir):
    """One of the sweep's configurations as a run of its own."""
    return base + ["--lr", lr, "--clip_range", clip_range, "--run_dir", run_dir, "--quiet"]


def timed(argv, log):
    t0 = time.time()
    with open(log, "w") as out:
        code = subprocess.call([sys.executable, os.path.join(REPO, "main.py"), *argv], cwd=REPO,
                               stdout=out, stderr=subprocess.STDOUT)
    return time.time() - t0, code


def read_rows(sweep_dir):
    with open(os.path.join(sweep_dir, "sweep.csv")) as f:
        return list(csv.DictReader(f))


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def add_args(p):
    p.add_argument("--work_dir", default="/tmp/ddrl_sweep_time")
    p.add_argument("--num_samples", type=int, default=8)
    p.add_argument("--total_steps", type=int, default=50_000,
                   help="env steps of each trial and run at most (default: %(default)s)")
    p.add_argument("--out", default=None)


def run(args, argv):
    base = base_flags(args.total_steps)
    os.makedirs(args.work_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    result = {"commands": {}, "load_before": os.getloadavg()[0]}

    sweeps = {}
    for scheduler in ("asha", "fifo"):
        sweep_dir = os.path.join(args.work_dir, f"{scheduler}-{stamp}")
        flags = sweep_flags(base, scheduler, args.num_samples, sweep_dir)
        wall, code = timed(flags, sweep_dir + ".log")
        rows = read_rows(sweep_dir)
        sweeps[scheduler] = dict(wall_s=wall, returncode=code, trials=len(rows),
                                 env_steps=sum(int(r["env_steps"] or 0) for r in rows),
                                 reached=sum(r["stopped_because"] == "target_return" for r in rows),
                                 stopped_early=sum(r["stopped_because"] == "stopped_by_scheduler"
                                                   for r in rows))
        result["commands"][f"sweep-{scheduler}"] = "python main.py " + " ".join(flags)
        print(f"sweep {scheduler}: {wall:.1f} s, {sweeps[scheduler]}", flush=True)
    result["sweeps"] = sweeps

    # The ASHA sweep's configurations, one after another, each to its end.
    asha_dir = os.path.join(args.work_dir, f"asha-{stamp}")
    rows = read_rows(asha_dir)
    loop_dir = os.path.join(args.work_dir, f"loop-{stamp}")
    os.makedirs(loop_dir)
    t0, steps, codes = time.time(), 0, []
    for i, row in enumerate(rows):
        run_dir = os.path.join(loop_dir, f"trial{i}")
        flags = trial_flags(base, row["lr"], row["clip_range"], run_dir)
        _, code = timed(flags, run_dir + ".log")
        codes.append(code)
        steps += summary(run_dir)["env_steps"]
    result["sequential"] = dict(wall_s=time.time() - t0, env_steps=steps, returncodes=codes)
    result["commands"]["sequential"] = ("python main.py " + " ".join(base)
                                        + " --lr LR --clip_range CLIP --run_dir DIR --quiet  # per trial")
    print(f"one after another: {result['sequential']['wall_s']:.1f} s", flush=True)

    # The best trial again, from best.yaml.
    best_yaml = os.path.join(asha_dir, "best.yaml")
    rerun_dir = os.path.join(args.work_dir, f"best-{stamp}")
    wall, code = timed(["--config", best_yaml, "--run_dir", rerun_dir], rerun_dir + ".log")
    with open(best_yaml) as f:  # its header names the trial
        best_id = f.readline().split(": ", 1)[1].split(" ", 1)[0]
    best_row = next(r for r in rows if r["trial"] == best_id)
    again = summary(rerun_dir)
    result["reproduce"] = dict(best_trial=best_row, rerun=again, rerun_wall_s=wall,
                               rerun_returncode=code)
    print(f"best trial {best_id}: best eval {best_row['best_eval_return']}, "
          f"{best_row['env_steps']} env steps; --config best.yaml: best eval "
          f"{again['best_eval_return']}, steps to target {again['steps_to_target']}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
