"""gym_env: any gymnasium id (--gym_id) with Discrete or Box actions and Box observations."""
import gymnasium as gym
import numpy as np
import ray

from core.registry import ConfigError
from core.state import (generator_state, plain_attributes, set_attributes,
                        set_generator_state)
from envs import register_env, OBSERVATION


@register_env("gym_env")
@ray.remote
class GymEnv:
    """Wraps gymnasium.make(--gym_id); Box observations, Discrete or Box actions."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gym_id", default="CartPole-v1",
                            help="gymnasium environment id, e.g. CartPole-v1, Pendulum-v1, "
                                 "LunarLanderContinuous-v3 (default: %(default)s)")
        parser.add_argument("--max_episode_steps", type=int, default=None,
                            help="override the id's time limit (default: the id's own)")

    def __init__(self, args, seed=None):
        kwargs = {}
        if getattr(args, "max_episode_steps", None):
            kwargs["max_episode_steps"] = args.max_episode_steps
        render_mode = getattr(args, "render_mode", None)
        if render_mode:
            kwargs["render_mode"] = render_mode
        try:
            self.env = gym.make(args.gym_id, **kwargs)
        except gym.error.Error as exc:
            raise ConfigError(f"--gym_id {args.gym_id!r} cannot be made by gymnasium: {exc}. "
                              f"Use a registered id such as CartPole-v1 or Pendulum-v1.") from exc
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        spec = self.env.spec
        # The default --target_return: the id's own "solved" threshold (475 for CartPole-v1).
        self.reward_threshold = spec.reward_threshold if spec is not None else None

    def reset(self, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self.action_space.seed(seed)
        return obs, info

    def step(self, action):
        if isinstance(self.action_space, gym.spaces.Discrete):
            action = int(np.asarray(action).reshape(()))
        obs, reward, terminated, truncated, info = self.env.step(action)
        return OBSERVATION(obs, float(reward), bool(terminated), bool(truncated), info)

    # -- exact resume ----------------------------------------------------------------------
    # A checkpoint can hold an env's state only if it is plain data. For gymnasium's classic
    # control envs it is (CartPole's `state` array, the time limit's step count, the RNG); a
    # Box2D or MuJoCo env keeps it in a simulator object, so those return None and a restored
    # run starts their episodes afresh.
    def get_state(self):
        """The env's state as plain data, or None where it cannot be captured."""
        base = self.env.unwrapped
        if not type(base).__module__.startswith("gymnasium.envs.classic_control"):
            return None
        layers, env = [], self.env
        while True:
            layers.append(plain_attributes(env))
            if env is base:
                break
            env = env.env
        return {"layers": layers, "np_random": generator_state(base.np_random),
                "action_space_rng": generator_state(self.action_space.np_random)}

    def set_state(self, state):
        env = self.env
        for attributes in state["layers"]:
            set_attributes(env, attributes)
            if env is self.env.unwrapped:
                break
            env = env.env
        set_generator_state(self.env.unwrapped.np_random, state["np_random"])
        set_generator_state(self.action_space.np_random, state["action_space_rng"])

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
