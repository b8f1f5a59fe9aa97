"""custom_env: a hand-written wrapper around a small simulator of its own (no gym.make).

Copy this file to start your own env. A wrapper needs: ``add_args`` (static, its flags),
``__init__(args, seed=None)`` setting ``observation_space`` and ``action_space``,
``reset(seed=None, options=None) -> (obs, info)`` and
``step(action) -> (obs, reward, terminated, truncated, info)`` (or the OBSERVATION named tuple).
``@ray.remote`` is optional: ddrl runs the class in the rollout worker's process or as its own
actor (--env_placement) either way.
"""
import numpy as np
from gymnasium import spaces

from envs import register_env, OBSERVATION


class PointMass:
    """The simulator: a unit mass on a line, pushed by a bounded force, with friction.

    x'' = force - friction * x'. Explicit Euler steps of ``dt`` seconds.
    """

    def __init__(self, dt=0.05, friction=0.5, max_force=1.0):
        self.dt, self.friction, self.max_force = dt, friction, max_force
        self.position = 0.0
        self.velocity = 0.0

    def set_state(self, position, velocity):
        self.position, self.velocity = float(position), float(velocity)

    def advance(self, force):
        force = float(np.clip(force, -self.max_force, self.max_force))
        self.velocity += (force - self.friction * self.velocity) * self.dt
        self.position += self.velocity * self.dt


@register_env("custom_env")
class PointMassEnv:
    """Example wrapper: drive a point mass to the origin; --custom_env_goal_tolerance ends early."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--custom_env_episode_steps", type=int, default=200,
                            help="time limit of an episode, in steps (default: %(default)s)")
        parser.add_argument("--custom_env_goal_tolerance", type=float, default=0.05,
                            help="distance and speed under which the goal is reached and the "
                                 "episode terminates (default: %(default)s)")
        parser.add_argument("--custom_env_discrete", action="store_true",
                            help="three discrete actions (push left, none, right) instead of a "
                                 "continuous force")

    def __init__(self, args, seed=None):
        self.sim = PointMass()
        self.max_steps = args.custom_env_episode_steps
        self.tolerance = args.custom_env_goal_tolerance
        self.discrete = args.custom_env_discrete
        high = np.array([2.0, 2.0], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        if self.discrete:
            self.action_space = spaces.Discrete(3)
        else:
            self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.reward_threshold = None
        self.rng = np.random.default_rng(seed)
        self.steps = 0

    def _obs(self):
        obs = np.array([self.sim.position, self.sim.velocity], dtype=np.float32)
        return np.clip(obs, self.observation_space.low, self.observation_space.high)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.sim.set_state(self.rng.uniform(-1.0, 1.0), self.rng.uniform(-0.5, 0.5))
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        force = (int(action) - 1.0) if self.discrete else float(np.asarray(action).reshape(-1)[0])
        self.sim.advance(force)
        self.steps += 1
        distance = abs(self.sim.position)
        # Dense shaping toward the origin, a small cost on force; +10 on reaching the goal.
        reward = -distance - 0.01 * force ** 2
        terminated = distance < self.tolerance and abs(self.sim.velocity) < self.tolerance
        if terminated:
            reward += 10.0
        if abs(self.sim.position) > 2.0:  # left the track
            terminated, reward = True, reward - 10.0
        truncated = (not terminated) and self.steps >= self.max_steps
        return OBSERVATION(self._obs(), float(reward), bool(terminated), bool(truncated), {})

    def close(self):
        pass
