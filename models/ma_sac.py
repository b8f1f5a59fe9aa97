"""ma_sac: SAC for a team of agents with continuous actions whose observation has a row per
agent (envs/pettingzoo_env.py with a Box action per agent), decentralized actors and a
centralized critic (as MADDPG: Lowe et al. 2017, with SAC's entropy-regularized update).

    python main.py --env_name pettingzoo_env --pz_env mpe2.simple_spread_v3 \\
        --pz_kwargs '{"N": 3, "max_cycles": 25, "continuous_actions": true}' --model_name ma_sac

- Actor: each agent's squashed Gaussian from its own row alone: one network shared by every
  agent (the rows tell agents apart with the env's --agent_ids), or with --policy_map one per
  policy, applied to that policy's agents' rows only. The team's log-probability is the sum
  of the agents', so the entropy target (auto) is -(agents x action width).
- Critic: SAC's twin Q networks on every row and the whole team action (a centralized
  critic), with their target copies; the team's reward.
- Everything else is SAC's (models/sac.py): the update, the temperature, replay, priorities,
  Ape-X-shaped workers, export (the actors' deterministic actions).
"""
import math

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from core.registry import ConfigError
from models import register_model
from models.encoders import Flatten
from models.ma_ppo import ConcatRows, check_team_spaces, policy_boxes
from models.sac import Actor, SACModel, TwinQ, frozen_copy


class RowActors(nn.Module):
    """Each policy's Actor on each of its agents' rows: a team's observation -> (means, log
    stds), each [B, N * K] in the team action's order."""

    def __init__(self, encoder, names, counts, width, actors):
        super().__init__()
        self.encoder = encoder  # flattens the rows to [B, N * width] (policies in order)
        self.names, self.counts, self.width = list(names), list(counts), width
        self.actors = nn.ModuleDict(actors)

    def forward(self, obs):
        x = self.encoder(obs)
        batch, agents = x.shape[0], sum(self.counts)
        rows = x[:, :agents * self.width].reshape(batch, agents, self.width)
        means, log_stds, start = [], [], 0
        for name, count in zip(self.names, self.counts):
            mine = rows[:, start:start + count].reshape(batch * count, self.width)
            mu, log_std = self.actors[name](mine)
            means.append(mu.reshape(batch, -1))
            log_stds.append(log_std.reshape(batch, -1))
            start += count
        return torch.cat(means, dim=1), torch.cat(log_stds, dim=1)


@register_model("ma_sac")
class TeamSACModel(SACModel):
    """SAC with decentralized actors and a centralized critic: the module docstring."""

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        check_team_spaces(observation_space, action_space, "ma_sac", "sac")
        if not isinstance(action_space, spaces.Box):
            raise ConfigError(
                f"model ma_sac (SAC) takes a continuous action per agent (a Box [agents, K] "
                f"team action); this env's is {action_space}. For Discrete actions use "
                f"--model_name ma_dqn or ma_ppo.")
        super().check_spaces(observation_space, action_space)

    def build_networks(self, args):
        space, sizes = self.observation_space, args.sac_hidden_sizes
        if isinstance(space, spaces.Dict):
            boxes = policy_boxes(space)
            names, counts = list(boxes), [box.shape[0] for box in boxes.values()]
            width = next(iter(boxes.values())).shape[1]
        else:
            names, (agents, width) = ["team"], space.shape
            counts = [agents]

        def rows():  # the rows as [B, N * width], policies in order (a global state left out)
            return ConcatRows(names) if isinstance(space, spaces.Dict) else Flatten(space)
        if self.action_shape[0] != sum(counts):
            raise ConfigError(f"model ma_sac: {sum(counts)} agents but a team action of "
                              f"{self.action_shape[0]} rows ({self.action_space}).")
        per_agent = int(np.prod(self.action_shape[1:]))
        self.actor = RowActors(rows(), names, counts, width,
                               {name: Actor(width, sizes, per_agent) for name in names})
        self.critic = TwinQ(sum(counts) * width, sizes, self.action_dim, encoder=rows())
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha)))
