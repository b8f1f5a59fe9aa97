"""A PettingZoo parallel env whose agents arrive mid-episode (tests/test_multi_agent.py): a_0
is there from the start, a_1 joins after step 1, a_2 after step 2; every agent present gets a
reward of 1 per step; all are truncated at step 4. It refuses actions for agents not there.

    python main.py --env_name pettingzoo_env --pz_env tests.plugins.arriving_agents --pz_kwargs '{}' --model_name ma_ppo
"""
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Arriving(ParallelEnv):
    metadata = {"name": "arriving_v0"}

    def __init__(self, **kwargs):
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self.steps = 0

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        return {a: np.full(2, self.steps / 10, np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.steps = ["a_0"], 0
        return self._obs(), {}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.steps += 1
        rewards = {a: 1.0 for a in self.agents}
        done = self.steps >= 4
        terminations = {a: False for a in self.agents}
        truncations = {a: done for a in self.agents}
        if done:
            self.agents = []
        elif self.steps <= 2:
            self.agents = self.possible_agents[:self.steps + 1]
        return self._obs(), rewards, terminations, truncations, {a: {} for a in self.agents}


def parallel_env(**kwargs):
    return Arriving(**kwargs)
