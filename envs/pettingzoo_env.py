"""pettingzoo_env: a PettingZoo parallel env (every agent acts at once) as one env of a team.

    python main.py --env_name pettingzoo_env --pz_env mpe2.simple_spread_v3 --model_name ma_ppo

The N agents of ``possible_agents`` become the rows of one observation and one action:

- observation: Box(N, D), agent i's row = its own observation (flattened, zero-padded to the
  widest agent's), then 1 if it is still in the episode (0 once it has left: PettingZoo's
  ``agents`` list shrinks; its row is zeros then), then with ``--agent_ids`` a one-hot of i
  (what a policy shared by all agents needs to tell them apart, when their observations do not);
- action: MultiDiscrete([A] * N) when every agent has Discrete(A) actions, Box(N, K) when every
  agent has a Box(K) (each row clipped to its agent's bounds); an agent that has left gets no
  action (its row is ignored);
- reward: the team's, the sum (``--team_reward sum``, default) or the mean of the agents'
  rewards at that step; the episode terminates when every agent has terminated, and is
  truncated when any is truncated (PettingZoo's ``max_cycles``) before that.

So every part of ddrl that takes a Box observation and a MultiDiscrete or Box action drives it
as it is (rollouts, faults, checkpoints, clusters, sweeps, --evaluate, export): with
``--model_name ma_ppo`` (models/ma_ppo.py) one policy network shared by the agents acts on each
agent's row alone (decentralized acting), and the critic sees every row (a centralized critic,
as MAPPO: Yu et al. 2022) or each agent's own. What this shape does not give: a reward per agent
(mixed and competitive games), several policies mapped to groups of agents, turn-taking (AEC)
envs and self-play.

``--pz_env`` names a module with a ``parallel_env(**kwargs)`` function (``mpe2.simple_spread_v3``,
``pettingzoo.butterfly.pistonball_v6``, a module of your own); ``--pz_kwargs`` is a JSON object of
its arguments (default for MPE: ``{"N": 3, "max_cycles": 25, "continuous_actions": false}``
where the module takes them).
"""
import importlib
import json

import numpy as np
from gymnasium import spaces

from core.registry import ConfigError
from envs import register_env


def _kwargs(text):
    """``--pz_kwargs``: checked here, kept as the JSON text (configs are plain, hashable data)."""
    _parse_kwargs(text)
    return text


def _parse_kwargs(text):
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--pz_kwargs {text!r} is not JSON ({exc}); give an object such as "
                          f"'{{\"N\": 3, \"max_cycles\": 25}}'.") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--pz_kwargs {text!r}: a JSON object of the env's arguments, such as "
                          f"'{{\"N\": 3}}'.")
    return value


def make_parallel_env(module_name, kwargs):
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--pz_env {module_name}: cannot import it ({exc}). Give a module with "
                          f"a parallel_env() function, such as mpe2.simple_spread_v3 (pip "
                          f"package mpe2) or pettingzoo.butterfly.pistonball_v6.") from None
    factory = getattr(module, "parallel_env", None)
    if factory is None:
        raise ConfigError(f"--pz_env {module_name} has no parallel_env() function: this wrapper "
                          f"takes PettingZoo's parallel API (every agent acts at once).")
    return factory(**kwargs)


@register_env("pettingzoo_env")
class PettingZooTeamEnv:
    """A PettingZoo parallel env as one team: a row per agent (the module docstring)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pz_env", default="mpe2.simple_spread_v3",
                            help="module with a PettingZoo parallel_env() (default: "
                                 "%(default)s)")
        parser.add_argument("--pz_kwargs", type=_kwargs,
                            default='{"N": 3, "max_cycles": 25, "continuous_actions": false}',
                            help="JSON object of parallel_env()'s arguments (default: "
                                 "'{\"N\": 3, \"max_cycles\": 25, \"continuous_actions\": "
                                 "false}')")
        parser.add_argument("--team_reward", choices=["sum", "mean"], default="sum",
                            help="the team's reward at a step: the sum or the mean of the "
                                 "agents' (default: %(default)s)")
        parser.add_argument("--agent_ids", action="store_true",
                            help="append a one-hot of the agent's index to its row")

    @staticmethod
    def label(config):
        return getattr(config, "pz_env", "pettingzoo").split(".")[-1]

    def __init__(self, args, seed=None):
        self.env = make_parallel_env(args.pz_env, _parse_kwargs(args.pz_kwargs))
        self.agents = list(self.env.possible_agents)
        self.team_reward = args.team_reward
        self.agent_ids = args.agent_ids
        self.reward_threshold = None
        observation_spaces = [self.env.observation_space(a) for a in self.agents]
        action_spaces = [self.env.action_space(a) for a in self.agents]
        for agent, space in zip(self.agents, observation_spaces):
            if not isinstance(space, spaces.Box):
                raise ConfigError(f"--env_name pettingzoo_env: agent {agent!r} of {args.pz_env} "
                                  f"observes {space}; this wrapper stacks Box observations "
                                  f"(flattened) into one row per agent.")
        self.widths = [int(np.prod(space.shape)) for space in observation_spaces]
        self.obs_width = max(self.widths)
        n = len(self.agents)
        row = self.obs_width + 1 + (n if self.agent_ids else 0)
        self.observation_space = spaces.Box(-np.inf, np.inf, (n, row), np.float32)
        self.action_space = self._team_actions(args.pz_env, action_spaces)
        self.live = set()

    def _team_actions(self, name, action_spaces):
        first = action_spaces[0]
        if all(isinstance(s, spaces.Discrete) for s in action_spaces):
            return spaces.MultiDiscrete([int(s.n) for s in action_spaces],
                                        start=[int(s.start) for s in action_spaces])
        if all(isinstance(s, spaces.Box) and s.shape == first.shape and len(s.shape) == 1
               for s in action_spaces):
            self.action_bounds = [(s.low, s.high) for s in action_spaces]
            low = np.stack([s.low for s in action_spaces]).astype(np.float32)
            high = np.stack([s.high for s in action_spaces]).astype(np.float32)
            return spaces.Box(low, high, dtype=np.float32)
        raise ConfigError(f"--env_name pettingzoo_env: the agents of {name} act in "
                          f"{', '.join(sorted({str(s) for s in action_spaces}))}; this wrapper "
                          f"takes agents that all have Discrete actions, or all a 1-D Box of "
                          f"one shape.")

    def _rows(self, observations):
        n = len(self.agents)
        rows = np.zeros(self.observation_space.shape, np.float32)
        for i, agent in enumerate(self.agents):
            if agent in observations and agent in self.live:
                rows[i, :self.widths[i]] = np.asarray(observations[agent], np.float32).ravel()
                rows[i, self.obs_width] = 1.0
        if self.agent_ids:
            rows[:, self.obs_width + 1:] = np.eye(n, dtype=np.float32)
        return rows

    def reset(self, seed=None, options=None):
        observations, _ = self.env.reset(seed=seed, options=options)
        self.live = set(self.env.agents)
        return self._rows(observations), {}

    def step(self, action):
        action = np.asarray(action)
        discrete = isinstance(self.action_space, spaces.MultiDiscrete)
        actions = {agent: (int(action[i]) if discrete else
                           np.asarray(action[i], np.float32))
                   for i, agent in enumerate(self.agents) if agent in self.live}
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        acted = list(actions)
        values = [float(rewards.get(a, 0.0)) for a in acted]
        reward = float(np.sum(values) if self.team_reward == "sum" else np.mean(values))
        for agent in acted:
            if terminations.get(agent, False) or truncations.get(agent, False):
                self.live.discard(agent)
        self.live &= set(self.env.agents)
        terminated = all(terminations.get(a, False) for a in acted)
        truncated = not terminated and (any(truncations.get(a, False) for a in acted)
                                        or not self.live)
        rows = self._rows(observations)
        return rows, reward, terminated, truncated, {"agent_rewards": dict(zip(acted, values))}

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
