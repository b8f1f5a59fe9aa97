"""pettingzoo_env: a PettingZoo parallel env (every agent acts at once) as one env of a team.

    python main.py --env_name pettingzoo_env --pz_env mpe2.simple_spread_v3 --model_name ma_ppo

The N agents of ``possible_agents`` become the rows of one observation and one action:

- observation: Box(N, D), agent i's row = its own observation (flattened, zero-padded to the
  widest agent's), then 1 if it is in the episode (0 before it has come and once it has left:
  PettingZoo's ``agents`` list grows and shrinks; its row is zeros then), then with ``--agent_ids`` a one-hot of i
  (what a policy shared by all agents needs to tell them apart, when their observations do not);
- action: MultiDiscrete([A] * N) when every agent has Discrete(A) actions, Box(N, K) when every
  agent has a Box(K) (each row clipped to its agent's bounds); an agent that has left gets no
  action (its row is ignored);
- reward: the team's, the sum (``--team_reward sum``, default) or the mean of the agents'
  rewards at that step; the episode terminates when every agent that acted has terminated and
  none is left, and is truncated when any is truncated (PettingZoo's ``max_cycles``) before
  that.

So every part of ddrl that takes a Box observation and a MultiDiscrete or Box action drives it
as it is (rollouts, faults, checkpoints, clusters, sweeps, --evaluate, export): with
``--model_name ma_ppo`` (models/ma_ppo.py) one policy network shared by the agents acts on each
agent's row alone (decentralized acting), and the critic sees every row (a centralized critic,
as MAPPO: Yu et al. 2022) or each agent's own. Every step's info also carries each agent's own
reward, whether it acted and whether it left (core/types.py ``STEP_REPORT_KEY``): with
``ma_ppo --agent_rewards`` every agent learns from its own reward (mixed and competitive games).

With ``--policy_map PATTERN=NAME,...`` the agents are grouped by the policy that acts for
them (shell-style patterns on agent ids, the first that matches wins; ``per_agent``: a policy
per agent, named by its id): the observation is then a Dict {policy name: Box(agents of that
policy, D)}, policies in sorted order (as gymnasium orders a Dict), their agents in
``possible_agents`` order, and the team action lists the agents in that same order. The model
learns a policy per name from its own agents' rows (models/ma_ppo.py); each episode's last info
carries every policy's return (the mean over its agents of their own rewards' sum) as
``return_<name>`` for metrics.csv.

``--global_state``: the observation also carries the env's global state (PettingZoo's
``state()``, flattened) as its ``state`` entry, and is a Dict even without ``--policy_map`` (one
policy, ``team``); ma_ppo's central critic then values the state rather than the rows (MAPPO's
centralized critic on the environment's state), the actors still see their rows alone.

``--pz_env`` names a module with a ``parallel_env(**kwargs)`` function (``mpe2.simple_spread_v3``,
``pettingzoo.butterfly.pistonball_v6``, a module of your own); ``--pz_kwargs`` is a JSON object of
its arguments (default for MPE: ``{"N": 3, "max_cycles": 25, "continuous_actions": false}``
where the module takes them).
"""
import argparse
import fnmatch
import importlib
import json

import numpy as np
from gymnasium import spaces

from core.argtypes import checked_text
from core.errors import ConfigError
from core.types import STEP_REPORT_KEY
from envs import register_env


#: the global state's entry in the observation (--global_state), and the one policy's name
#: when there is no --policy_map
STATE, TEAM = "state", "team"


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


def map_entries(text):
    """``--policy_map``'s entries: PATTERN=NAME pairs separated by commas, or per_agent."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if entries == ["per_agent"]:
        return entries
    for entry in entries:
        pattern, sep, name = entry.partition("=")
        if not sep or not pattern or not name.isidentifier():
            raise ConfigError(f"--policy_map {text!r}: give PATTERN=NAME pairs separated by "
                              f"commas (a shell-style pattern on agent ids, a policy name that "
                              f"is an identifier), such as 'adversary_*=adversary,agent_*=good', "
                              f"or per_agent.")
    return entries


def policy_groups(agents, entries):
    """{policy name: [agent indices]} for ``--policy_map`` entries (the module docstring)."""
    if list(entries) == ["per_agent"]:
        return {agent: [i] for i, agent in enumerate(agents)}
    if "per_agent" in entries:
        raise ConfigError("--policy_map: per_agent stands alone (a policy for every agent); "
                          "drop the PATTERN=NAME pairs beside it.")
    pairs = [entry.partition("=")[::2] for entry in entries]
    groups, unmatched = {}, []
    for i, agent in enumerate(agents):
        name = next((name for pattern, name in pairs if fnmatch.fnmatchcase(agent, pattern)),
                    None)
        if name is None:
            unmatched.append(agent)
        else:
            groups.setdefault(name, []).append(i)
    if unmatched:
        raise ConfigError(f"--policy_map {','.join(entries)}: no pattern covers agent(s) "
                          f"{', '.join(unmatched)} (the env's agents: {', '.join(agents)}). Add "
                          f"a pattern for them, such as '*=shared' last.")
    idle = [pattern for pattern, _ in pairs
            if not any(fnmatch.fnmatchcase(agent, pattern) for agent in agents)]
    if idle:
        raise ConfigError(f"--policy_map: pattern(s) {', '.join(idle)} match none of the env's "
                          f"agents ({', '.join(agents)}); a typo?")
    return groups


def with_render_mode(kwargs, render_mode):
    """The env's arguments, plus the ``render_mode`` a video asks for (--record_video:
    rgb_array frames of the whole env)."""
    return {**kwargs, "render_mode": render_mode} if render_mode else kwargs


def make_pettingzoo_env(module_name, kwargs, function, examples, api):
    """``module_name.function(**kwargs)``, or a one-paragraph ConfigError naming
    ``examples`` (modules that have it) and the ``api`` the wrapper takes."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--pz_env {module_name}: cannot import it ({exc}). Give a module with "
                          f"a {function}() function, such as {examples}.") from None
    factory = getattr(module, function, None)
    if factory is None:
        raise ConfigError(f"--pz_env {module_name} has no {function}() function: this wrapper "
                          f"takes PettingZoo's {api}.")
    return factory(**kwargs)


def make_parallel_env(module_name, kwargs):
    return make_pettingzoo_env(module_name, kwargs, "parallel_env",
                               "mpe2.simple_spread_v3 (pip package mpe2) or "
                               "pettingzoo.butterfly.pistonball_v6",
                               "parallel API (every agent acts at once)")


@register_env("pettingzoo_env")
class PettingZooTeamEnv:
    """A PettingZoo parallel env as one team: a row per agent (the module docstring)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pz_env", default="mpe2.simple_spread_v3",
                            help="module with a PettingZoo parallel_env() (default: "
                                 "%(default)s)")
        parser.add_argument("--pz_kwargs", type=checked_text(_parse_kwargs),
                            default='{"N": 3, "max_cycles": 25, "continuous_actions": false}',
                            help="JSON object of parallel_env()'s arguments (default: "
                                 "'{\"N\": 3, \"max_cycles\": 25, \"continuous_actions\": "
                                 "false}')")
        parser.add_argument("--team_reward", choices=["sum", "mean"], default="sum",
                            help="the team's reward at a step: the sum or the mean of the "
                                 "agents' (default: %(default)s)")
        parser.add_argument("--agent_ids", action=argparse.BooleanOptionalAction, default=False,
                            help="append a one-hot of the agent's index to its row")
        parser.add_argument("--global_state", action="store_true",
                            help="give the critic the env's global state (PettingZoo's "
                                 "state()): the observation becomes a Dict of the policies' "
                                 "rows (one policy 'team' without --policy_map) and 'state'")
        parser.add_argument("--policy_map", type=checked_text(map_entries), default=None,
                            help="which policy acts for which agents: PATTERN=NAME pairs "
                                 "separated by commas (shell-style patterns on agent ids, the "
                                 "first match wins), or per_agent; the observation becomes a "
                                 "Dict by policy (default: one policy for every agent, rows in "
                                 "a Box)")

    @staticmethod
    def label(config):
        return getattr(config, "pz_env", "pettingzoo").split(".")[-1]

    def __init__(self, args, seed=None):
        self.env = make_parallel_env(args.pz_env, with_render_mode(_parse_kwargs(args.pz_kwargs),
                                                                   args.render_mode))
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
        self.rows_shape = (n, row)
        self.observation_space = spaces.Box(-np.inf, np.inf, (n, row), np.float32)
        # --policy_map: the agents grouped by policy (sorted names), the team action in
        # that order; without it one group in the env's order
        entries = args.policy_map
        self.groups = policy_groups(self.agents, map_entries(entries)) if entries else None
        self.state_shape = self._state_shape(args) if args.global_state else None
        if self.state_shape is not None and self.groups is None:
            self.groups = {TEAM: list(range(n))}
        self.order = (list(range(n)) if self.groups is None else
                      [i for name in sorted(self.groups) for i in self.groups[name]])
        if self.groups is not None:
            self.observation_space = spaces.Dict({
                name: spaces.Box(-np.inf, np.inf, (len(rows), row), np.float32)
                for name, rows in self.groups.items()})
        if self.state_shape is not None:
            self.observation_space.spaces[STATE] = spaces.Box(-np.inf, np.inf,
                                                              self.state_shape, np.float32)
            self.observation_space = spaces.Dict(dict(self.observation_space.spaces))
        self.action_space = self._team_actions(args.pz_env,
                                               [action_spaces[i] for i in self.order])
        self.live = set()
        self.agent_returns = np.zeros(n)

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
        rows = np.zeros(self.rows_shape, np.float32)
        for i, agent in enumerate(self.agents):
            if agent in observations and agent in self.live:
                rows[i, :self.widths[i]] = np.asarray(observations[agent], np.float32).ravel()
                rows[i, self.obs_width] = 1.0
        if self.agent_ids:
            rows[:, self.obs_width + 1:] = np.eye(n, dtype=np.float32)
        return rows

    def _state_shape(self, args):
        """The shape of the env's global state (--global_state), or a one-paragraph error."""
        if STATE in (self.groups or {}):
            raise ConfigError(f"--global_state with a policy named {STATE!r} in --policy_map: "
                              f"the observation's {STATE!r} entry is the global state; rename "
                              f"that policy.")
        self.env.reset(seed=0)
        try:
            state = np.asarray(self.env.state(), np.float32)
        except NotImplementedError:
            raise ConfigError(f"--global_state: {args.pz_env} has no global state (PettingZoo's "
                              f"state() is not implemented there); drop --global_state, the "
                              f"central critic then sees every agent's row.") from None
        return (int(state.size),)

    def _observation(self, rows):
        if self.groups is None:
            return rows
        found = {name: rows[indices] for name, indices in self.groups.items()}
        if self.state_shape is not None:
            found[STATE] = np.asarray(self.env.state(), np.float32).reshape(self.state_shape)
        return found

    def reset(self, seed=None, options=None):
        observations, _ = self.env.reset(seed=seed, options=options)
        self.live = set(self.env.agents)
        self.agent_returns[:] = 0.0
        return self._observation(self._rows(observations)), {}

    def step(self, action):
        action = np.asarray(action)
        discrete = isinstance(self.action_space, spaces.MultiDiscrete)
        # the team action lists the agents in self.order (by policy with --policy_map)
        actions = {self.agents[i]: (int(action[j]) if discrete else
                                    np.asarray(action[j], np.float32))
                   for j, i in enumerate(self.order) if self.agents[i] in self.live}
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        acted = list(actions)
        values = [float(rewards.get(a, 0.0)) for a in acted]
        reward = float(np.sum(values) if self.team_reward == "sum" else np.mean(values))
        # who acts next: the env's agents now (newcomers join), less any that just ended
        self.live = {a for a in self.env.agents
                     if not (terminations.get(a, False) or truncations.get(a, False))}
        terminated = all(terminations.get(a, False) for a in acted) and not self.live
        truncated = not terminated and (any(truncations.get(a, False) for a in acted)
                                        or not self.live)
        for agent, value in zip(acted, values):
            self.agent_returns[self.agents.index(agent)] += value
        info = {"agent_rewards": dict(zip(acted, values)),
                STEP_REPORT_KEY: self._per_agent(rewards, acted, terminations, truncations,
                                               truncated)}
        if (terminated or truncated) and self.groups is not None:
            info["episode_metrics"] = {
                f"return_{name}": float(np.mean(self.agent_returns[indices]))
                for name, indices in self.groups.items()}
        return self._observation(self._rows(observations)), reward, terminated, truncated, info

    def _per_agent(self, rewards, acted, terminations, truncations, team_truncated):
        """Each agent's reward, whether it acted, whether it left the episode at this step, in
        the team action's order (core/types.py STEP_REPORT_KEY). An agent truncated on
        its own while the team goes on counts as having left (its row is empty from then on:
        nothing to bootstrap from); when the team is truncated, the team's truncation stands."""
        ids = [self.agents[i] for i in self.order]
        done = [a in acted and (terminations.get(a, False)
                                or (truncations.get(a, False) and not team_truncated))
                for a in ids]
        return {"rewards": np.array([float(rewards.get(a, 0.0)) if a in acted else 0.0
                                     for a in ids], np.float32),
                "acted": np.array([a in acted for a in ids], np.float32),
                "terminated": np.array(done, np.float32)}

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
