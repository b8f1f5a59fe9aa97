"""ddrl's APPO against Sample Factory 2.1.1's on CartPole-v1, the same settings on both sides:
env steps/s and time to a training return of 475.

    .venv/bin/python benchmarks/probe.py appo-vs-sf --sf_python /tmp/sfvenv/bin/python \\
        --seeds 0 1 2 --out benchmarks/results/appo-vs-sample-factory.json

The settings (ddrl's APPO CartPole preset, configs/appo-CartPole-v1.yaml, with constant
schedules since Sample Factory has no linear ones): 2 rollout workers x 4 envs, fragments
(rollouts) of 32 steps, batches of 256 samples, 10 epochs, V-trace with rho-bar = c-bar = 1,
PPO's clip 0.2, Adam at lr 1e-3, gamma 0.98, value coefficient 0.5, gradient norm 0.5, no
entropy bonus, separate 64x64 tanh actor and critic, advantages normalized, no input or return
normalization, on the CPU. Sample Factory runs in a venv of its own (its gymnasium pin is
0.29; ``python3.11 -m venv /tmp/sfvenv && /tmp/sfvenv/bin/pip install torch==2.13.0
sample-factory==2.1.1``) with those values as its flags (its value clipping, which ddrl's APPO
does not do, set out of reach), async_rl on, 1 policy worker. One difference is forced: Sample
Factory 2.1.1's V-trace path stops its learner at the first summary it records
(``AttributeError: 'AttrDict' object has no attribute 'advantages'``, learner.py
_record_summaries, with --with_vtrace True and --recurrence equal to the rollout, which its
V-trace requires), and its own CartPole example turns V-trace off; so it runs with
``--with_vtrace False`` and GAE lambda 1 (what V-trace with lambda 1 gives on data without
lag), PPO's clipped ratio against the acting policy bounding the lag. ``--sf_example`` adds a
run with its own CartPole example's flags (sf_examples/train_gym_env.py's docstring).

Neither system evaluates here: both are measured on their training episodes, the mean return
of the last 100 (Sample Factory's ``Avg episode reward``, reported every few seconds; ddrl's
from metrics.csv's per-row returns). Reported per run: env steps/s from the first report to
the last (the loop at speed), the whole process's wall time, and the time from process start
to the first report whose 100-episode mean reaches 475 (None: not within --steps).
"""
import csv
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

from probes import REPO, command, git_commit

SETTINGS = dict(workers=2, envs=4, rollout=32, batch=256, epochs=10, lr=1e-3, gamma=0.98,
                clip=0.2, vf_coef=0.5, max_grad_norm=0.5)
TARGET = 475.0


def add_args(p):
    p.add_argument("--sf_python", required=True,
                   help="the python of a venv with sample-factory==2.1.1")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=200_000, help="env steps per run")
    p.add_argument("--sf_example", action="store_true",
                   help="also Sample Factory with its own CartPole example's flags")
    p.add_argument("--out", default=None)


def ddrl_argv(steps, seed, run_dir):
    s = SETTINGS
    return [sys.executable, os.path.join(REPO, "main.py"), "--model_name", "appo",
            "--gym_id", "CartPole-v1", "--num_workers", str(s["workers"]),
            "--num_envs_per_worker", str(s["envs"]), "--rollout_steps", str(s["rollout"]),
            "--batch_size", str(s["batch"]), "--num_epochs", str(s["epochs"]),
            "--lr", str(s["lr"]), "--lr_schedule", "constant", "--clip_schedule", "constant",
            "--clip_range", str(s["clip"]), "--gamma", str(s["gamma"]),
            "--vtrace_rho_bar", "1", "--vtrace_c_bar", "1", "--vtrace_lambda", "1",
            "--vf_coef", str(s["vf_coef"]), "--max_grad_norm", str(s["max_grad_norm"]),
            "--ent_coef", "0", "--total_steps", str(steps), "--eval_interval", str(10 * steps),
            "--target_return", "none", "--seed", str(seed), "--run_dir", run_dir, "--quiet"]


def sf_argv(sf_python, steps, seed, train_dir, example=False):
    base = [sf_python, "-m", "sf_examples.train_gym_env", "--env", "CartPole-v1",
            "--experiment", "appo-vs-sf", "--train_dir", train_dir, "--device", "cpu",
            "--train_for_env_steps", str(steps), "--seed", str(seed),
            "--experiment_summaries_interval", "2"]
    if example:  # its own example's flags (sf_examples/train_gym_env.py)
        return base + ["--algo", "APPO", "--use_rnn", "False", "--num_envs_per_worker", "20",
                       "--policy_workers_per_policy", "2", "--recurrence", "1",
                       "--with_vtrace", "False", "--batch_size", "512", "--reward_scale", "0.1"]
    s = SETTINGS
    return base + ["--algo", "APPO", "--num_workers", str(s["workers"]),
                   "--num_envs_per_worker", str(s["envs"]), "--rollout", str(s["rollout"]),
                   "--batch_size", str(s["batch"]), "--num_batches_per_epoch", "1",
                   "--num_epochs", str(s["epochs"]), "--use_rnn", "False", "--recurrence", "1",
                   # its V-trace path fails (the module docstring): GAE(1) on lagged data
                   "--with_vtrace", "False", "--gae_lambda", "1.0",
                   "--encoder_mlp_layers", "64", "64", "--nonlinearity", "tanh",
                   "--actor_critic_share_weights", "False", "--learning_rate", str(s["lr"]),
                   "--lr_schedule", "constant", "--gamma", str(s["gamma"]),
                   "--ppo_clip_ratio", str(s["clip"]), "--ppo_clip_value", "1000000",
                   "--value_loss_coeff", str(s["vf_coef"]),
                   "--max_grad_norm", str(s["max_grad_norm"]), "--exploration_loss_coeff", "0",
                   "--normalize_input", "False", "--normalize_returns", "False",
                   "--reward_scale", "1"]


def sf_report(log, started):
    """(env steps/s first report to last, seconds from ``started`` to the first 100-episode
    mean >= 475 or None, the last mean) from Sample Factory's log."""
    points, reached, last = [], None, None
    for line in log.splitlines():
        stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\]", line)
        if not stamp:
            continue
        when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        frames = re.search(r"Total num frames: (\d+)", line)
        if frames and int(frames.group(1)) > 0:
            points.append((when, int(frames.group(1))))
        found = re.search(r"Avg episode reward: \[\(0, '([-\d.]+)'\)\]", line)
        if found:
            last = float(found.group(1))
            if reached is None and last >= TARGET:
                reached = when - started
    (t0, n0), (t1, n1) = points[0], points[-1]
    return (n1 - n0) / (t1 - t0), reached, last


def ddrl_report(run_dir, steps):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["env_steps"]]
    start = next((r for r in rows if int(r["env_steps"]) >= 0.2 * steps), rows[0])
    rate = ((int(rows[-1]["env_steps"]) - int(start["env_steps"]))
            / (float(rows[-1]["wall_time_s"]) - float(start["wall_time_s"])))
    window, reached, last = [], None, None  # (episodes, mean return) per row, last 100 episodes
    for row in rows:
        if row["train_return"] and int(row["episodes"] or 0):
            window.append((int(row["episodes"]), float(row["train_return"])))
            while sum(n for n, _ in window[1:]) >= 100:
                window.pop(0)
            count = sum(n for n, _ in window)
            last = sum(n * r for n, r in window) / count
            if reached is None and count >= 100 and last >= TARGET:
                reached = float(row["wall_time_s"])
    return rate, reached, last


def run(args, argv):
    results = []
    systems = ["ddrl-appo", "sample-factory"] + (["sample-factory-example"] if args.sf_example
                                                 else [])
    for i, seed in enumerate(args.seeds):
        for system in (systems if i % 2 == 0 else list(reversed(systems))):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.time()
                if system == "ddrl-appo":
                    run_dir = os.path.join(tmp, "run")
                    subprocess.run(ddrl_argv(args.steps, seed, run_dir), cwd=REPO, check=True,
                                   stdout=subprocess.DEVNULL)
                    wall = time.time() - started
                    rate, reached, last = ddrl_report(run_dir, args.steps)
                else:
                    done = subprocess.run(sf_argv(args.sf_python, args.steps, seed, tmp,
                                                  example=system.endswith("example")),
                                          cwd=tmp, text=True, capture_output=True, timeout=1200)
                    if done.returncode != 0 or "Traceback" in done.stdout + done.stderr:
                        raise SystemExit("appo-vs-sf: Sample Factory failed:\n"
                                         + (done.stdout + done.stderr)[-3000:])
                    wall = time.time() - started
                    rate, reached, last = sf_report(done.stdout + done.stderr, started)
            row = {"system": system, "seed": seed, "steps_per_s": rate, "wall_s": wall,
                   "time_to_475_s": reached, "last_mean_return": last}
            print(json.dumps(row), flush=True)
            results.append(row)
    summary = {}
    for system in systems:
        mine = [r for r in results if r["system"] == system]
        times = [r["time_to_475_s"] for r in mine]
        summary[system] = {"steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
                           "reached": sum(t is not None for t in times),
                           "time_to_475_s": (statistics.median(times)
                                             if all(t is not None for t in times) else None)}
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": command(argv), "commit": git_commit(),
                       "machine": platform.processor() or platform.machine(),
                       "settings": SETTINGS, "runs": results, "summary": summary}, f, indent=1)
