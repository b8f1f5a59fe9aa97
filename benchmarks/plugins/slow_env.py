"""slow_env: a gymnasium env whose every step waits --step_ms, as a remote simulator or a game
server does. Its own limit is 1000 / step_ms steps per second per env: what benchmarks/scaling.py
measures the platform against.

    python main.py --user_dir benchmarks/plugins --env_name slow_env --step_ms 5

The wait sleeps (the CPU is free meanwhile, as while a simulator on another machine computes),
to a deadline from the step's start, so the env's own work counts inside the wait.

Uneven simulators (the asynchronous loop's benchmark, benchmarks/probes/async_sync.py):
``--step_sigma S`` draws each step's time from a lognormal of mean --step_ms and log-space
spread S (heavy-tailed: with S = 1, one step in 20 takes over 2.6x the mean, one in 100 over
5x); ``--slow_reset_prob P --slow_reset_ms M``: a reset takes M ms more with probability P;
``--slow_workers 0 --slow_factor 4``: the envs of rollout worker 0 take 4x as long (a slower
machine, a heavier scene; the env learns its worker from ddrl's ``worker_index``). The draws
come from a generator of the env's own, seeded from its seed, so they disturb neither the env's
random numbers nor the policy's. The defaults are the plain env: every step --step_ms.
"""
import argparse
import math
import time

import gymnasium as gym
import numpy as np

from envs import OBSERVATION, register_env


def worker_slots(text):
    """--slow_workers: comma-separated rollout worker slots (integers from 0); '' or none."""
    if str(text).strip().lower() in ("", "none"):
        return ()
    try:
        slots = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        slots = (-1,)
    if min(slots) < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of rollout worker slots; give comma-separated integers "
            f"from 0 (slot 0 is the first worker), e.g. 0 or 0,3")
    return slots


@register_env("slow_env")
class SlowEnv:
    """A gymnasium id (--gym_id) whose step takes --step_ms (a remote simulator stand-in)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gym_id", default="CartPole-v1",
                            help="gymnasium id to wrap (default: %(default)s)")
        parser.add_argument("--step_ms", type=float, default=5.0,
                            help="wall time of one step, in ms; the mean with --step_sigma "
                                 "(default: %(default)s)")
        parser.add_argument("--reset_ms", type=float, default=0.0,
                            help="wall time of one reset, in ms (default: %(default)s)")
        parser.add_argument("--step_sigma", type=float, default=0.0,
                            help="steps take lognormal times of mean --step_ms with this "
                                 "spread of their log; 0: every step --step_ms "
                                 "(default: %(default)s)")
        parser.add_argument("--slow_reset_ms", type=float, default=0.0,
                            help="extra wall time of a slow reset, in ms (default: %(default)s)")
        parser.add_argument("--slow_reset_prob", type=float, default=0.0,
                            help="probability that a reset is slow (default: %(default)s)")
        parser.add_argument("--slow_workers", type=worker_slots, default=(),
                            help="rollout worker slots whose envs are --slow_factor times "
                                 "slower, comma-separated (default: none)")
        parser.add_argument("--slow_factor", type=float, default=4.0,
                            help="how many times slower the --slow_workers' envs are "
                                 "(default: %(default)s)")

    def __init__(self, args, seed=None, worker_index=None):
        self.env = gym.make(args.gym_id)
        scale = args.slow_factor if worker_index in args.slow_workers else 1.0
        self.step_s = float(args.step_ms) / 1000.0 * scale
        self.reset_s = float(args.reset_ms) / 1000.0 * scale
        self.sigma = float(args.step_sigma)
        self.slow_reset_s = float(args.slow_reset_ms) / 1000.0 * scale
        self.slow_reset_prob = float(args.slow_reset_prob)
        self.wait_rng = np.random.default_rng(None if seed is None else seed + 7919)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        spec = self.env.spec
        self.reward_threshold = spec.reward_threshold if spec is not None else None

    @staticmethod
    def wait_until(deadline):
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def step_time(self):
        if not self.sigma or not self.step_s:
            return self.step_s
        # a lognormal of mean m has mu = ln(m) - sigma^2 / 2
        return self.wait_rng.lognormal(math.log(self.step_s) - self.sigma ** 2 / 2, self.sigma)

    def reset(self, seed=None, options=None):
        wait = self.reset_s
        if self.slow_reset_prob and self.wait_rng.random() < self.slow_reset_prob:
            wait += self.slow_reset_s
        deadline = time.perf_counter() + wait
        found = self.env.reset(seed=seed, options=options)
        self.wait_until(deadline)
        return found

    def step(self, action):
        deadline = time.perf_counter() + self.step_time()
        if isinstance(self.action_space, gym.spaces.Discrete):
            action = int(np.asarray(action).reshape(()))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.wait_until(deadline)
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    def close(self):
        self.env.close()
