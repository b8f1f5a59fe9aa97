"""gym_env --vectorize: a gymnasium id's envs stepped as one batched env (core/batched_env.py).

- ``native``: the id's own vector implementation (``gym.make_vec(..., vectorization_mode=
  "vector_entry_point")``: CartPole-v1 steps all its envs in numpy at once). gymnasium's
  native vector envs reset in NextStep mode.
- ``sync``: gymnasium's SyncVectorEnv over gym_env's single envs (every gym_env flag applies:
  Atari preprocessing, --hide_obs, masks), in SameStep mode. Still one Python call per env
  inside, but one call from ddrl per step, and exact resume where the single envs have it.
- ``async``: gymnasium's AsyncVectorEnv, a process per env (simulators that compute for long
  enough to be worth a process each: MuJoCo, Atari), SameStep mode; no exact resume.

Evaluation always steps single envs of the same id and flags (envs/gym_env.py).
"""
import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from core.errors import ConfigError
from envs.gym_kwargs import as_dict, make_with_kwargs
from core.run.state import generator_state, plain_attributes, set_attributes, set_generator_state

VECTORIZE_MODES = ("none", "native", "sync", "async")


class GymVectorEnv:
    """The id's ``num_envs`` envs as one gymnasium vector env (the module docstring)."""

    def __init__(self, args, num_envs, single_env, wrapped_env):
        """``single_env()``: a gym_env single env for ``args`` (its ``env``: the gymnasium env
        with every wrapper); ``wrapped_env``: a picklable function that builds that gymnasium
        env (AsyncVectorEnv's processes call it). gym_env has registered the id."""
        self.vectorize = args.vectorize
        self.holders = None
        if args.vectorize == "native":
            try:
                spec = gym.spec(args.gym_id)
            except gym.error.Error as exc:
                raise ConfigError(f"--gym_id {args.gym_id!r} cannot be made by gymnasium: "
                                  f"{str(exc).rstrip('. ')}.") from exc
            if spec.vector_entry_point is None:
                raise ConfigError(f"--vectorize native: {args.gym_id} has no native vector "
                                  f"implementation in gymnasium (CartPole-v1 has one); use "
                                  f"--vectorize sync (one process) or async (a process per "
                                  f"env) for this id.")
            shaped = [flag for flag, on in (("--hide_obs", args.hide_obs),
                                            ("--drop_keys", args.drop_keys),
                                            ("--render_mode", args.render_mode)) if on]
            if shaped or args.gym_id.startswith("ALE/"):
                raise ConfigError(f"--vectorize native steps {args.gym_id}'s vector envs as "
                                  f"gymnasium makes them, without gym_env's wrappers "
                                  f"({', '.join(shaped) or 'Atari preprocessing'}); use "
                                  f"--vectorize sync or async with those.")
            kwargs = ({"max_episode_steps": args.max_episode_steps}
                      if args.max_episode_steps else {})
            self.env = make_with_kwargs(args.gym_id, kwargs, as_dict(args.gym_kwargs),
                                        num_envs=num_envs)
        elif args.vectorize == "sync":
            self.holders = [single_env() for _ in range(num_envs)]
            self.env = SyncVectorEnv([(lambda h=h: h.env) for h in self.holders],
                                     autoreset_mode=AutoresetMode.SAME_STEP)
        elif args.vectorize == "async":
            self.env = AsyncVectorEnv([wrapped_env] * num_envs,
                                      autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            raise ConfigError(f"--vectorize {args.vectorize!r}: choose one of "
                              f"{', '.join(VECTORIZE_MODES)}.")
        self.num_envs = num_envs
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.metadata = self.env.metadata
        spec = getattr(self.env, "spec", None) or gym.spec(args.gym_id)
        self.reward_threshold = spec.reward_threshold if spec is not None else None
        space = self.single_action_space
        self.action_shape = (num_envs,) + tuple(space.shape or ())
        self.action_dtype = (np.int64 if isinstance(space, (gym.spaces.Discrete,
                                                            gym.spaces.MultiDiscrete))
                             else np.int8 if isinstance(space, gym.spaces.MultiBinary)
                             else np.float32 if np.issubdtype(space.dtype, np.floating)
                             else space.dtype)

    def reset(self, seed=None, options=None):
        if self.vectorize == "native" and isinstance(seed, (list, tuple)):
            seed = seed[0]  # one generator for all the envs: seeded by the first seed
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        actions = np.asarray(actions).astype(self.action_dtype, copy=False)
        return self.env.step(actions.reshape(self.action_shape))

    # -- exact resume: the native classic-control envs' arrays, or each sync env's state -------
    def get_state(self):
        if self.vectorize == "native":
            if not type(self.env).__module__.startswith("gymnasium.envs.classic_control"):
                return None
            return {"attributes": plain_attributes(self.env),
                    "np_random": generator_state(self.env.np_random)}
        if self.holders is None:
            return None
        states = [holder.get_state() for holder in self.holders]
        if any(state is None for state in states):
            return None
        return {"envs": states, "autoreset": plain_attributes(self.env)}

    def set_state(self, state):
        if "envs" in state:
            for holder, env_state in zip(self.holders, state["envs"]):
                holder.set_state(env_state)
            set_attributes(self.env, state["autoreset"])
            return
        set_attributes(self.env, state["attributes"])
        set_generator_state(self.env.np_random, state["np_random"])

    def close(self):
        self.env.close()
