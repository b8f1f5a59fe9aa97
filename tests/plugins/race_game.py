"""A turn-based PettingZoo (AEC) game for any number of players (tests/test_selfplay.py): a
count starts at 0; in turn each player adds 1 or 2 (action 0 or 1; adding 2 is masked out when
it would pass the goal); the player who brings the count to the goal wins (+1), every other
player loses (-1). Observation: a Dict of a one-hot of the count and an int8 action_mask.

    python main.py --env_name pettingzoo_aec --pz_env tests.plugins.race_game --pz_kwargs '{"players": 3}' --model_name selfplay_ppo
"""
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import AgentSelector


class Race(AECEnv):
    metadata = {"name": "race_v0", "render_modes": []}

    def __init__(self, players=3, goal=10, render_mode=None):
        super().__init__()
        self.goal = goal
        self.possible_agents = [f"player_{i}" for i in range(players)]
        self.render_mode = render_mode
        self.observation_spaces = {a: spaces.Dict({
            "observation": spaces.Box(0, 1, (goal + 1,), np.int8),
            "action_mask": spaces.Box(0, 1, (2,), np.int8)}) for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(2) for a in self.possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def observe(self, agent):
        count = np.zeros(self.goal + 1, np.int8)
        count[self.count] = 1
        mask = np.array([1, 1 if self.count + 2 <= self.goal else 0], np.int8)
        return {"observation": count, "action_mask": mask}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.count = 0
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.selector = AgentSelector(self.agents)
        self.agent_selection = self.selector.reset()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        self.count = min(self.goal, self.count + int(action) + 1)
        if self.count == self.goal:
            self.rewards = {a: (1.0 if a == agent else -1.0) for a in self.agents}
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = self.selector.next()
        self._accumulate_rewards()


def env(**kwargs):
    return Race(**kwargs)
