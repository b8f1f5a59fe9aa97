"""An env plugin kept outside ddrl: CartPole with Gaussian noise on the observations.

Load it with `python main.py --user_dir examples/user_plugins --env_name noisy_cartpole`.
It carries @ray.remote, so `--env_placement actor` runs each copy in its own process.
"""
import gymnasium as gym
import numpy as np
import ray

from envs import register_env


@register_env("noisy_cartpole")
@ray.remote
class NoisyCartPole:
    """CartPole-v1 whose observations carry Gaussian noise of --obs_noise std."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--obs_noise", type=float, default=0.01,
                            help="std of the Gaussian noise added to observations "
                                 "(default: %(default)s)")

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.noise = args.obs_noise
        self.rng = np.random.default_rng(seed)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.reward_threshold = 475.0

    def _noisy(self, obs):
        return (obs + self.rng.normal(0.0, self.noise, obs.shape)).astype(np.float32)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._noisy(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(int(action))
        return self._noisy(obs), reward, terminated, truncated, info
