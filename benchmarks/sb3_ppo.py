import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
"""Peer run: Stable-Baselines3 PPO with RL-Zoo hyperparameters, stopped at a target eval return.

    .venv/bin/python benchmarks/sb3_ppo.py --env CartPole-v1 --seed 0 --target_return 475 --out_dir /tmp/sb3

Writes OUT_DIR/summary.json (same keys as ddrl's) and OUT_DIR/eval.csv (one row per evaluation).
"""
import argparse
import csv
import json
import os

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv


def lin(start):
    """RL-Zoo's `lin_X`: linear decay from X to 0 over the run (SB3 passes progress_remaining 1 -> 0)."""
    return lambda progress_remaining: progress_remaining * start


# hyperparams/ppo.yml of DLR-RM/rl-baselines3-zoo ("Tuned" entries); eval_freq/target are ours.
PRESETS = {
    "CartPole-v1": dict(
        n_envs=8, n_timesteps=100_000, eval_freq=2_000, target_return=475.0,
        ppo=dict(policy="MlpPolicy", n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                 n_epochs=20, ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2))),
    "Pendulum-v1": dict(
        n_envs=4, n_timesteps=100_000, eval_freq=10_000, target_return=-200.0,
        ppo=dict(policy="MlpPolicy", n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                 ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)),
}


class EvalStop(BaseCallback):
    """Every eval_freq env steps: 10 deterministic episodes on a separate env; stop at the target.
    Evaluation runs inside the training loop, so its time counts in wall time (as it does for ddrl)."""

    def __init__(self, eval_env, eval_freq, n_episodes, target, csv_path, t0=None):
        super().__init__()
        self.eval_env, self.eval_freq, self.n_episodes, self.target = eval_env, eval_freq, n_episodes, target
        self.t0 = T0 if t0 is None else t0  # a script importing this passes its own process-start time
        self.next_eval = eval_freq
        self.rows = []  # (env_steps, wall_time_s, eval_return)
        self.reached = None  # (wall_time_s, env_steps) of the first eval >= target
        self.csv = open(csv_path, "w", newline="")
        self.writer = csv.writer(self.csv)
        self.writer.writerow(["env_steps", "wall_time_s", "eval_return"])

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += self.eval_freq
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.n_episodes, deterministic=True)
        row = (self.num_timesteps, time.time() - self.t0, float(mean))
        self.rows.append(row)
        self.writer.writerow(row)
        self.csv.flush()
        if mean >= self.target:
            self.reached = (row[1], row[0])
            return False  # stops model.learn
        return True


def make_eval_env(env_id, seed):
    """The separate evaluation env, seeded apart from the training envs."""
    eval_env = Monitor(gym.make(env_id))
    eval_env.reset(seed=seed + 10_000)
    return eval_env


def write_summary(out_dir, model, cb, t0=None):
    """OUT_DIR/summary.json with ddrl's keys (and system "sb3"); printed as one JSON line too."""
    returns = [r[2] for r in cb.rows]
    summary = dict(
        env_steps=int(model.num_timesteps),
        wall_time_s=time.time() - (T0 if t0 is None else t0),
        best_eval_return=max(returns) if returns else None,
        last_eval_return=returns[-1] if returns else None,
        stopped_because="target_return" if cb.reached else "total_steps",
        target_reached=cb.reached is not None,
        time_to_target_s=cb.reached[0] if cb.reached else None,
        steps_to_target=int(cb.reached[1]) if cb.reached else None,
        system="sb3",
    )
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1", choices=sorted(PRESETS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None, help="default: the preset's")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--eval_freq", type=int, default=None, help="env steps between evaluations; default: the preset's")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--max_steps", type=int, default=None,
                   help="default: RL-Zoo n_timesteps (1e5). Note lin_ schedules decay over max_steps.")
    args = p.parse_args()

    # One torch thread: on 2 cores, 2 threads made this very run 6.5x slower (measured here).
    torch.set_num_threads(1)
    preset = PRESETS[args.env]
    target = preset["target_return"] if args.target_return is None else args.target_return
    eval_freq = args.eval_freq or preset["eval_freq"]
    max_steps = args.max_steps or preset["n_timesteps"]
    os.makedirs(args.out_dir, exist_ok=True)

    env = make_vec_env(args.env, n_envs=preset["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)
    eval_env = make_eval_env(args.env, args.seed)
    model = PPO(env=env, seed=args.seed, device="cpu", verbose=0, **preset["ppo"])
    cb = EvalStop(eval_env, eval_freq, args.eval_episodes, target, os.path.join(args.out_dir, "eval.csv"))
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    write_summary(args.out_dir, model, cb)


if __name__ == "__main__":
    main()
