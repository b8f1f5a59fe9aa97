import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run: Stable-Baselines3 PPO with RL-Zoo hyperparameters, stopped at a target eval return.

    .venv/bin/python benchmarks/sb3_ppo.py --env CartPole-v1 --seed 0 --target_return 475 --out_dir /tmp/sb3

Writes OUT_DIR/summary.json (same keys as ddrl's), OUT_DIR/eval.csv (one row per evaluation)
and OUT_DIR/progress.csv (SB3's own log, one row per rollout: rollout/ep_rew_mean, the training
episodes' mean return as the Monitor wrapper saw it, and train/* as entropy_loss, approx_kl,
clip_fraction: to set beside ddrl's metrics.csv).
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
from stable_baselines3.common.logger import configure
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
    # hyperparams/atari.yml's PPO entry (what ddrl's configs/ppo-atari.yaml holds), 1M frames
    # (250k agent steps) instead of 10M; evaluation as ddrl's preset: 5 whole games every 25k.
    # The envs are ddrl's own Atari chain (atari_env below), not SB3's AtariWrapper.
    "ALE/Breakout-v5": dict(
        n_envs=8, n_timesteps=250_000, eval_freq=25_000, eval_episodes=5, target_return=float("inf"),
        ppo=dict(policy="CnnPolicy", n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
                 gae_lambda=0.95, learning_rate=lin(2.5e-4), clip_range=lin(0.1), ent_coef=0.01,
                 vf_coef=0.5, max_grad_norm=0.5)),
}


def atari_env(env_id, seed, evaluation=False):
    """ddrl's Atari env chain (envs/gym_env.py: the same gym.make arguments and wrap_atari) with
    ddrl's default flags, so that SB3 trains and is evaluated on exactly what ddrl sees:
    sign-clipped rewards in training, whole games at the game's score in evaluation."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from envs.gym_env import wrap_atari
    from options.options import parse_args
    args = parse_args(["--env_name", "gym_env", "--gym_id", env_id])
    env = gym.make(env_id, frameskip=1, max_num_frames_per_episode=args.max_episode_frames)
    env = wrap_atari(env, args, evaluation=evaluation)
    env = Monitor(env)  # outermost: the episode return as the wrapped env reports it
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


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
    if env_id.startswith("ALE/"):
        return atari_env(env_id, seed + 10_000, evaluation=True)
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
    p.add_argument("--eval_episodes", type=int, default=None, help="default: the preset's, else 10")
    p.add_argument("--max_steps", type=int, default=None,
                   help="default: RL-Zoo n_timesteps (1e5). Note lin_ schedules decay over max_steps.")
    p.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads (default: 1; the figures behind the suites' 1 or 2 are in "
                        "benchmarks/README.md and BENCHMARKS.md)")
    args = p.parse_args()

    torch.set_num_threads(args.torch_threads)
    preset = PRESETS[args.env]
    target = preset["target_return"] if args.target_return is None else args.target_return
    eval_freq = args.eval_freq or preset["eval_freq"]
    max_steps = args.max_steps or preset["n_timesteps"]
    os.makedirs(args.out_dir, exist_ok=True)

    if args.env.startswith("ALE/"):
        env = DummyVecEnv([lambda i=i: atari_env(args.env, args.seed + i) for i in range(preset["n_envs"])])
    else:
        env = make_vec_env(args.env, n_envs=preset["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)
    eval_env = make_eval_env(args.env, args.seed)
    model = PPO(env=env, seed=args.seed, device="cpu", verbose=0, **preset["ppo"])
    model.set_logger(configure(args.out_dir, ["csv"]))  # progress.csv, one row per rollout
    episodes = args.eval_episodes or preset.get("eval_episodes", 10)
    cb = EvalStop(eval_env, eval_freq, episodes, target, os.path.join(args.out_dir, "eval.csv"))
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    write_summary(args.out_dir, model, cb)


if __name__ == "__main__":
    main()
