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

from core.errors import ConfigError
from models import register_model
from models.ma_ppo import RowNetworks, check_team_spaces, team_layout
from models.sac import Actor, SACModel, TwinQ, frozen_copy


class RowActors(RowNetworks):
    """Each policy's Actor on each of its agents' rows: a team's observation -> (means, log
    stds), each [B, N * K] in the team action's order."""

    def forward(self, obs):
        found = self.outputs(obs)
        return tuple(torch.cat([out[i].reshape(out[i].shape[0], -1) for out in found], dim=1)
                     for i in range(2))


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
        names, counts, width, rows = team_layout(self.observation_space)
        if self.action_shape[0] != sum(counts):
            raise ConfigError(f"model ma_sac: {sum(counts)} agents but a team action of "
                              f"{self.action_shape[0]} rows ({self.action_space}).")
        sizes, per_agent = args.sac_hidden_sizes, int(np.prod(self.action_shape[1:]))
        self.actor = RowActors(rows(), names, counts, width,
                               {name: Actor(width, sizes, per_agent) for name in names})
        self.critic = TwinQ(sum(counts) * width, sizes, self.action_dim, encoder=rows())
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha)))
