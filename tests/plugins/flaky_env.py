"""An env that raises now and then, as a simulator binding that loses its connection: a run
must survive it (core/sampling/envs.py rebuilds the env and cuts its episode).

    python main.py --user_dir tests/plugins --env_name flaky_cartpole --fail_prob 0.001
"""
import gymnasium as gym
import numpy as np

from envs import register_env, OBSERVATION


@register_env("flaky_cartpole")
class FlakyCartPole:
    """CartPole-v1 whose step (and optionally reset) raises at random (fault tests)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--fail_prob", type=float, default=0.0005,
                            help="probability that a step call raises RuntimeError "
                                 "(default: %(default)s)")
        parser.add_argument("--fail_reset_prob", type=float, default=0.0,
                            help="probability that a reset call raises (default: %(default)s)")
        parser.add_argument("--fail_always", action="store_true",
                            help="every step raises: an env that is broken, not flaky")

    def __init__(self, args, seed=None):
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.reward_threshold = 475.0
        self.fail_prob = float(getattr(args, "fail_prob", 0.0005))
        self.fail_reset_prob = float(getattr(args, "fail_reset_prob", 0.0))
        self.fail_always = bool(getattr(args, "fail_always", False))
        # The faults come from the constructor's seed only, never a reset's: an env rebuilt
        # with a fresh seed does not replay them, while its episodes (seeded by reset) can be.
        self.rng = np.random.default_rng(seed)

    def reset(self, seed=None, options=None):
        if self.rng.random() < self.fail_reset_prob:
            raise RuntimeError("simulated simulator disconnect (reset)")
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self.action_space.seed(seed)
        return obs, info

    def step(self, action):
        if self.fail_always or self.rng.random() < self.fail_prob:
            raise RuntimeError("simulated simulator disconnect")
        obs, reward, terminated, truncated, info = self.env.step(int(np.asarray(action)))
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
