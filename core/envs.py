"""A group of envs stepped together, with automatic reset, hosted in-process or as actors.

``--env_placement worker`` (default) runs the wrapper classes inside the rollout worker: a
CartPole step costs ~7 us and a Ray call ~1.1 ms, so cheap envs must not pay a call per step
(benchmarks/sampling.py measures both placements). ``--env_placement actor`` gives every env its
own actor for heavy simulators; the group then steps all of them with one ray.get per step.
"""
import numpy as np
import ray
from gymnasium import spaces

from core.plugins import make_env, make_env_actor


class StepResult:
    __slots__ = ("observations", "rewards", "terminated", "truncated", "final_observations")

    def __init__(self, observations, rewards, terminated, truncated, final_observations):
        self.observations = observations            # [E, ...] after auto-reset
        self.rewards = rewards                      # [E]
        self.terminated = terminated                # [E] bool
        self.truncated = truncated                  # [E] bool
        self.final_observations = final_observations  # {e: obs before reset} for ended episodes


def to_env_action(action_space, action):
    if isinstance(action_space, spaces.Box):
        # The Gaussian is unbounded; the env gets the action clipped to its bounds, the agent
        # keeps the sampled one for the log-probability (as SB3 does).
        return np.clip(action, action_space.low, action_space.high)
    return action


class EnvGroup:
    def __init__(self, plugins, args, seeds, placement="worker"):
        self.placement = placement
        self.seeds = list(seeds)
        if placement == "actor":
            self.envs = [make_env_actor(plugins, args, s) for s in self.seeds]
            # __ray_call__ runs a function on the actor's instance: works for any wrapper,
            # whether or not it defines a method returning its spaces.
            self.observation_space, self.action_space = ray.get(self.envs[0].__ray_call__.remote(
                lambda env: (env.observation_space, env.action_space)))
        else:
            self.envs = [make_env(plugins, args, s) for s in self.seeds]
            self.observation_space = self.envs[0].observation_space
            self.action_space = self.envs[0].action_space

    def __len__(self):
        return len(self.envs)

    def _call(self, method, args_per_env):
        if self.placement == "actor":
            return ray.get([getattr(env, method).remote(*a) for env, a in
                            zip(self.envs, args_per_env)])
        return [getattr(env, method)(*a) for env, a in zip(self.envs, args_per_env)]

    def _reset(self, indices, seeds=None):
        if self.placement == "actor":
            results = ray.get([self.envs[i].reset.remote(seed=None if seeds is None else seeds[k])
                               for k, i in enumerate(indices)])
        else:
            results = [self.envs[i].reset(seed=None if seeds is None else seeds[k])
                       for k, i in enumerate(indices)]
        return [obs for obs, _info in results]

    def reset(self):
        """First reset, seeded: env e of this group gets seeds[e]."""
        return np.stack(self._reset(range(len(self.envs)), self.seeds))

    def step(self, actions) -> StepResult:
        env_actions = [to_env_action(self.action_space, a) for a in actions]
        results = self._call("step", [(a,) for a in env_actions])
        observations = [r[0] for r in results]
        rewards = np.array([r[1] for r in results], dtype=np.float32)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        ended = np.flatnonzero(terminated | truncated)
        final = {}
        if len(ended):
            final = {int(e): observations[e] for e in ended}
            for e, obs in zip(ended, self._reset(ended)):
                observations[e] = obs
        return StepResult(np.stack(observations), rewards, terminated, truncated, final)

    def get_state(self):
        """Every env's state (see envs/gym_env.py:get_state), or None if one of them cannot
        give it (a wrapper without get_state, or a simulator that is not plain data)."""
        if self.placement == "actor":
            states = ray.get([env.__ray_call__.remote(
                lambda env: env.get_state() if hasattr(env, "get_state") else None)
                for env in self.envs])
        else:
            states = [env.get_state() if hasattr(env, "get_state") else None
                      for env in self.envs]
        return None if any(s is None for s in states) else states

    def set_state(self, states):
        if self.placement == "actor":
            ray.get([env.set_state.remote(s) for env, s in zip(self.envs, states)])
        else:
            for env, state in zip(self.envs, states):
                env.set_state(state)

    def reset_all(self, seeds):
        """Reset every env with these seeds; the new first observations, stacked."""
        return np.stack(self._reset(range(len(self.envs)), list(seeds)))

    def close(self):
        for env in self.envs:
            if self.placement == "actor":
                ray.kill(env)
            else:
                getattr(env, "close", lambda: None)()
