"""A PettingZoo parallel env with two kinds of agents (tests/test_policy_map.py): scouts
(observation of 2, Discrete(3) actions) and a tank (observation of 3, Discrete(4)); an agent's
observation is filled with its index in ``possible_agents`` and the step count, and its reward
is the action it was given, so a test sees which agent got which row and which action.

    python main.py --env_name pettingzoo_env --pz_env tests.plugins.two_kinds --pz_kwargs '{}' \\
        --model_name ma_ppo --policy_map 'scout_*=scout,tank_*=tank'
"""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class TwoKinds(ParallelEnv):
    metadata = {"name": "two_kinds_v0"}

    def __init__(self, episode_length=5, **kwargs):
        self.possible_agents = ["scout_0", "tank_0", "scout_1"]
        self.episode_length = episode_length
        self.steps = 0
        self.received = []  # the actions of every step, as the env got them

    def observation_space(self, agent):
        return spaces.Box(-10.0, 10.0, (3 if agent.startswith("tank") else 2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(4 if agent.startswith("tank") else 3)

    def _obs(self):
        return {a: np.full(self.observation_space(a).shape, i + self.steps / 100, np.float32)
                for i, a in enumerate(self.possible_agents)}

    def reset(self, seed=None, options=None):
        self.agents, self.steps = list(self.possible_agents), 0
        return self._obs(), {}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        for agent, action in actions.items():
            assert self.action_space(agent).contains(action), (agent, action)
        self.received.append(dict(actions))
        self.steps += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        done = self.steps >= self.episode_length
        terminations = {a: done for a in self.agents}
        truncations = {a: False for a in self.agents}
        obs = self._obs()
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


def parallel_env(**kwargs):
    return TwoKinds(**kwargs)
