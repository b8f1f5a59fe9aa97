"""slow_env: a gymnasium env whose every step waits --step_ms, as a remote simulator or a game
server does. Its own limit is 1000 / step_ms steps per second per env: what benchmarks/scaling.py
measures the platform against.

    python main.py --user_dir benchmarks/plugins --env_name slow_env --step_ms 5

The wait sleeps (the CPU is free meanwhile, as while a simulator on another machine computes),
to a deadline from the step's start, so the env's own work counts inside the wait.
"""
import time

import gymnasium as gym
import numpy as np

from envs import OBSERVATION, register_env


@register_env("slow_env")
class SlowEnv:
    """A gymnasium id (--gym_id) whose step takes --step_ms (a remote simulator stand-in)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gym_id", default="CartPole-v1",
                            help="gymnasium id to wrap (default: %(default)s)")
        parser.add_argument("--step_ms", type=float, default=5.0,
                            help="wall time of one step, in ms (default: %(default)s)")
        parser.add_argument("--reset_ms", type=float, default=0.0,
                            help="wall time of one reset, in ms (default: %(default)s)")

    def __init__(self, args, seed=None):
        self.env = gym.make(args.gym_id)
        self.step_s = float(args.step_ms) / 1000.0
        self.reset_s = float(getattr(args, "reset_ms", 0.0)) / 1000.0
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        spec = self.env.spec
        self.reward_threshold = spec.reward_threshold if spec is not None else None

    @staticmethod
    def wait_until(deadline):
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def reset(self, seed=None, options=None):
        deadline = time.perf_counter() + self.reset_s
        found = self.env.reset(seed=seed, options=options)
        self.wait_until(deadline)
        return found

    def step(self, action):
        deadline = time.perf_counter() + self.step_s
        if isinstance(self.action_space, gym.spaces.Discrete):
            action = int(np.asarray(action).reshape(()))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.wait_until(deadline)
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    def close(self):
        self.env.close()
