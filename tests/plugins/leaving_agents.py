"""A PettingZoo parallel env whose agents leave mid-episode (tests/test_multi_agent.py):

    python main.py --env_name pettingzoo_env --pz_env tests.plugins.leaving_agents --pz_kwargs '{}' --model_name ma_ppo
"""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Leaving(ParallelEnv):
    """Three agents; agent i terminates after 2 + 2 i steps (agent 2 is truncated at 6): agents
    leave mid-episode. Each agent's reward is its index + 1; it refuses actions for agents that
    are gone, as PettingZoo envs do."""
    metadata = {"name": "leaving_v0"}

    def __init__(self, **kwargs):
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self.steps = 0

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2 + int(agent[-1]),), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents, self.steps = list(self.possible_agents), 0
        return {a: np.full(2 + int(a[-1]), 0.5, np.float32) for a in self.agents}, {}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.steps += 1
        obs = {a: np.full(2 + int(a[-1]), self.steps / 10, np.float32) for a in self.agents}
        rewards = {a: float(int(a[-1]) + 1) for a in self.agents}
        terminations = {a: self.steps >= 2 + 2 * int(a[-1]) and a != "a_2" for a in self.agents}
        truncations = {a: a == "a_2" and self.steps >= 6 for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


def parallel_env(**kwargs):
    return Leaving(**kwargs)
