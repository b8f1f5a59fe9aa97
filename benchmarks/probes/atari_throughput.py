"""Atari throughput: PPO on ALE/Breakout-v5 with RL-Zoo's Atari settings, env frames per second.

    .venv/bin/python benchmarks/probe.py atari-throughput --steps 8192 --out benchmarks/results/atari_throughput.json

Systems, each in a process of its own, one after another (never two at once):
  raw            the preprocessed envs alone (8 envs, uniform random actions, no model): the ceiling
  raw-envpool    the same game as one EnvPool pool of 8 envs (envs/envpool_env.py, its C++
                 preprocessing set by the same flags), one call a step for all 8
  ddrl-0workers  main.py with configs/ppo-atari.yaml, --num_workers 0 (--torch_threads 1 and 2)
  ddrl-2workers  the same with 2 Ray rollout workers of 4 envs, each computing the gradient of
                 its half of every minibatch (--grad_workers 2; the learner averages and applies)
  ddrl-2workers-ahead
                 2 Ray rollout workers of 4 envs that only sample, their next fragment while the
                 learner updates (--sample_ahead on); the learner computes every gradient on 2
                 torch threads (--grad_workers 0)
  ddrl-envpool-0workers-2threads
                 ddrl-0workers on 2 torch threads with the envs of an EnvPool pool
                 (configs/ppo-atari-envpool.yaml: the same hyperparameters and flags)
  sb3            Stable-Baselines3 PPO, CnnPolicy, the same hyperparameters (torch threads 1 and 2)

Equal terms: every system steps the same env chain (envs/gym_env.py's wrap_atari: no-op starts,
frame skip 4 with max-pooling, 84x84 grayscale, 4 stacked frames, FIRE at each life, sign-clipped
rewards), 8 envs x 128 steps per round, 4 epochs of minibatches of 256, the Nature CNN with linear
heads shared by policy and value, lr 2.5e-4 and clip 0.1 decaying linearly. No evaluation.
Frames per second = 4 x agent steps per second (frame skip 4). "steady" excludes the first round
(process start, imports, Ray, the first update's allocations); "whole" is from process start.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from probes import REPO, child, command

FRAME_SKIP = 4
ROUND = 8 * 128


def atari_args(gym_id):
    from options.options import parse_args
    return parse_args(["--gym_id", gym_id])


def make_env_fn(gym_id, seed):
    def make():
        import gymnasium as gym
        from envs.gym_env import wrap_atari
        args = atari_args(gym_id)
        env = gym.make(gym_id, frameskip=1, max_num_frames_per_episode=args.max_episode_frames)
        env = wrap_atari(env, args)
        env.reset(seed=seed)
        return env
    return make


def run_raw(gym_id, steps):
    import numpy as np
    t0 = time.perf_counter()
    envs = [make_env_fn(gym_id, seed)() for seed in range(8)]
    rng = np.random.default_rng(0)
    marks = []
    for t in range(steps // 8):
        for env in envs:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                env.reset()
        if (t + 1) * 8 % ROUND == 0:
            marks.append(((t + 1) * 8, time.perf_counter() - t0))
    return marks


def envpool_id(gym_id):
    return gym_id.split("/", 1)[-1]  # ALE/Breakout-v5 -> EnvPool's Breakout-v5


def run_raw_envpool(gym_id, steps):
    import numpy as np
    from envs.envpool_env import EnvPoolEnv
    from options.options import parse_args
    t0 = time.perf_counter()
    args = parse_args(["--env_name", "envpool_env", "--envpool_id", envpool_id(gym_id)])
    pool = EnvPoolEnv(args, 8, seed=0)
    pool.reset(seed=list(range(8)))
    n = pool.single_action_space.n
    rng = np.random.default_rng(0)
    marks = []
    for t in range(steps // 8):  # NextStep: the pool resets an ended env at its next step
        pool.step(rng.integers(n, size=8))
        if (t + 1) * 8 % ROUND == 0:
            marks.append(((t + 1) * 8, time.perf_counter() - t0))
    return marks


def run_sb3(gym_id, steps, threads):
    import torch
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Marks(BaseCallback):
        def __init__(self):
            super().__init__()
            self.marks = []

        def _on_rollout_start(self):  # the previous round's update is done
            if self.num_timesteps:
                self.marks.append((self.num_timesteps, time.perf_counter() - t0))

        def _on_step(self):
            return True

    env = DummyVecEnv([make_env_fn(gym_id, seed) for seed in range(8)])
    model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
                gae_lambda=0.95, learning_rate=lambda p: 2.5e-4 * p, clip_range=lambda p: 0.1 * p,
                ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, seed=0, device="cpu", verbose=0)
    marks = Marks()
    model.learn(total_timesteps=steps + ROUND, callback=marks)  # the last round's end is marked
    return marks.marks[:steps // ROUND]


def ddrl_command(gym_id, steps, workers, threads, run_dir, ahead=False, envpool=False):
    """main.py's argv for a ddrl system: the preset (configs/ppo-atari.yaml, or its EnvPool
    twin configs/ppo-atari-envpool.yaml) with this shape."""
    env = (["--config", os.path.join(REPO, "configs", "ppo-atari-envpool.yaml"), "--envpool_id",
            envpool_id(gym_id)] if envpool else ["--gym_id", gym_id])
    return [sys.executable, os.path.join(REPO, "main.py"), *env, "--num_workers",
           str(workers), "--num_envs_per_worker", str(8 // max(1, workers)), "--torch_threads",
           str(threads), "--total_steps", str(steps), "--eval_interval", str(10 ** 9),
           "--target_return", "none", "--run_dir", run_dir,
           "--grad_workers", "0" if ahead else str(workers),
           "--sample_ahead", "on" if ahead else "auto",
           "--quiet", "--no-tensorboard", "--checkpoint_interval", str(10 ** 9)]


def run_ddrl(gym_id, steps, workers, threads, run_dir, ahead=False, envpool=False):
    t0 = time.perf_counter()
    cmd = ddrl_command(gym_id, steps, workers, threads, run_dir, ahead, envpool)
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    import csv
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    marks = [(int(r["env_steps"]), float(r["wall_time_s"])) for r in rows]
    return marks, wall


def summarize(marks, wall=None):
    steps, last = marks[-1]
    first_steps, first = marks[0]
    steady = (steps - first_steps) / (last - first) if last > first else float("nan")
    whole = steps / (wall if wall is not None else last)
    return {"env_steps": steps, "steady_frames_per_s": FRAME_SKIP * steady,
            "whole_frames_per_s": FRAME_SKIP * whole, "marks": marks}


def add_args(parser):
    parser.add_argument("--gym_id", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=8192, help="agent steps per system")
    parser.add_argument("--systems", nargs="+", default=[
        "raw", "ddrl-0workers-1thread", "ddrl-0workers-2threads", "ddrl-2workers",
        "sb3-1thread", "sb3-2threads"])
    parser.add_argument("--out", default=None)
    parser.add_argument("--_one", default=None, help=argparse.SUPPRESS)


def run(args, argv):
    if args._one:  # a child process: one in-process system, its marks on stdout
        kind, threads = args._one.split(":")
        marks = (run_raw(args.gym_id, args.steps) if kind == "raw"
                 else run_raw_envpool(args.gym_id, args.steps) if kind == "raw-envpool"
                 else run_sb3(args.gym_id, args.steps, int(threads)))
        print(json.dumps(marks))
        return
    results = {}
    for system in args.systems:
        if system.startswith("ddrl"):
            workers = 2 if "2workers" in system else 0
            ahead = system.endswith("-ahead")
            threads = 2 if "2threads" in system or ahead else 1
            marks, wall = run_ddrl(args.gym_id, args.steps, workers, threads,
                                   f"/tmp/atari_throughput/{system}-{time.time():.0f}", ahead,
                                   envpool="envpool" in system)
        else:
            t0 = time.perf_counter()
            threads = 2 if "2threads" in system else 1
            kind = system if system.startswith("raw") else "sb3"
            out = subprocess.run(child("atari-throughput", "--gym_id", args.gym_id, "--steps",
                                       str(args.steps), "--_one", f"{kind}:{threads}"), check=True,
                                 capture_output=True, text=True, cwd=REPO).stdout
            marks, wall = json.loads(out.strip().splitlines()[-1]), time.perf_counter() - t0
        results[system] = summarize(marks, wall)
        r = results[system]
        print(f"{system:24s} steady {r['steady_frames_per_s']:7.0f} frames/s   whole "
              f"{r['whole_frames_per_s']:7.0f} frames/s   ({r['env_steps']} steps)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gym_id": args.gym_id, "steps": args.steps, "cpu": platform.processor()
                       or platform.machine(), "cpus": os.cpu_count(), "command": command(argv),
                       "results": results}, f, indent=1)
