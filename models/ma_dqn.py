"""ma_dqn: DQN for a team of agents whose observation has a row per agent
(envs/pettingzoo_env.py), by value decomposition (VDN: Sunehag et al. 2018, arXiv:1706.05296).

    python main.py --env_name pettingzoo_env --pz_env mpe2.simple_spread_v3 --model_name ma_dqn

- Each agent's Q: its policy's Q network (an MLP of --dqn_hidden_sizes, --dueling as dqn's) on
  the agent's own row alone, Q_i(o_i, a_i); without --policy_map one network shared by every
  agent (parameter sharing; the rows tell agents apart with the env's --agent_ids), with it a
  network per policy, applied to that policy's agents' rows only.
- The team's Q is the sum, Q(s, a) = sum_i Q_i(o_i, a_i), so the team's greedy action is each
  agent's own greedy action (decentralized acting) and the target decomposes the same way:
  y = R + gamma^k (1 - terminated) sum_i Q_target_i(o'_i, a*_i), a*_i = argmax of the online
  network (double Q) or of the target network, for agent i alone.
- Loss, target network, n-step returns, prioritized replay, Ape-X's many actors: dqn's
  (models/dqn.py; the trainer is the replay loop, the agent dqn_agent), on the team's reward.
- Exploration: epsilon-greedy per agent: each agent of an env explores on its own with that
  env's epsilon (the linear schedule's or its Ape-X ladder slot's).

An agent absent from the episode (before it comes, after it leaves) has a zero row and its
action is ignored by the env; its Q term still counts in the sum (a constant the network
learns for the empty row), as in the team's log-probability of ma_ppo without
--agent_rewards. The global state (--global_state) is left out: VDN's Q terms see rows only.
"""
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from core.errors import ConfigError
from models import register_model
from models.dqn import MASKED_Q, DQNActing, DQNModel, QNetwork
from models.encoders import Flatten
from models.ma_ppo import RowNetworks, check_team_spaces, team_layout
from models.sac import frozen_copy


class TeamQ(RowNetworks):
    """Each policy's Q network on each of its agents' rows: a team's observation -> Q values
    [B, N, A_max], agents in the team action's order, the columns past a policy's own actions
    at MASKED_Q (policies may have different numbers of actions)."""

    def __init__(self, encoder, names, counts, width, nets, actions):
        super().__init__(encoder, names, counts, width, nets)
        self.actions = list(actions)

    def forward(self, obs):
        most = max(self.actions)
        return torch.cat([F.pad(q, (0, most - q.shape[-1]), value=MASKED_Q)
                          for q in self.outputs(obs)], dim=1)


@register_model("ma_dqn")
class TeamDQNModel(DQNModel):
    """DQN for a team by value decomposition (VDN): the module docstring."""

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        check_team_spaces(observation_space, action_space, "ma_dqn", "dqn")
        if not isinstance(action_space, spaces.MultiDiscrete):
            raise ConfigError(
                f"model ma_dqn (VDN) takes a Discrete action per agent (a MultiDiscrete team "
                f"action): it values each agent's actions and picks the best. This env's team "
                f"action is {action_space}; for continuous actions use --model_name ma_ppo or ma_sac.")

    def build_networks(self, args):
        names, counts, width, rows = team_layout(self.observation_space)
        nvec = np.asarray(self.action_space.nvec).reshape(-1)
        firsts = np.cumsum([0] + counts[:-1])
        actions = [int(nvec[first]) for first in firsts]
        self.agents = sum(counts)
        self.action_counts = np.repeat(actions, counts)  # each agent's number of actions
        nets = {name: QNetwork(Flatten(spaces.Box(-np.inf, np.inf, (width,))),
                               args.dqn_hidden_sizes, count, args.dueling,
                               self.noisy_sigma0(args))
                for name, count in zip(names, actions)}
        self.q_net = TeamQ(rows(), names, counts, width, nets, actions)
        self.q_target = frozen_copy(self.q_net)
        self.num_actions = max(actions)

    # -- acting --------------------------------------------------------------------------------
    @torch.no_grad()
    def q_values(self, obs):
        """Every agent's Q of every action, numpy [B, N, A_max] (padding at MASKED_Q)."""
        return self.q_net(self.flat_obs(obs)).float().cpu().numpy()

    def choose_actions(self, obs, deterministic=False):
        """Each agent's greedy action, or with its env's epsilon a uniform one of its own
        actions; [B, N] indices from 0."""
        q = self.acting_q_values(obs, deterministic)
        rows = len(q)
        actions = q.argmax(-1)
        epsilons = self.epsilon_for(rows, deterministic)
        explore = self.acting_rng.random((rows, self.agents)) < epsilons[:, None]
        if explore.any():
            uniform = np.floor(self.acting_rng.random((rows, self.agents))
                               * self.action_counts).astype(np.int64)
            actions = np.where(explore, uniform, actions)
        return actions.astype(np.int64), {}

    def export_module(self):
        """The team's greedy action from tensors only: DQNActing on the team's Q network (its
        argmax over the last axis is each agent's)."""
        return DQNActing(self)

    # -- learning ------------------------------------------------------------------------------
    def unpack(self, batch):
        obs, actions, *rest = super().unpack(batch)
        return (obs, actions.reshape(-1, self.agents), *rest)

    def q_taken(self, obs, actions):
        """The team's Q of the actions taken, sum_i Q_i(o_i, a_i): [B] (dqn's loss and
        priorities are then the team's)."""
        q = self.q_net(obs).float()
        return q.gather(2, actions.unsqueeze(-1)).squeeze(-1).sum(1)

    @torch.no_grad()
    def targets(self, rewards, next_obs, terminated, discounts):
        """R + gamma^k (1 - terminated) sum_i Q_target_i(o'_i, a*_i), each a*_i the agent's
        own argmax (double Q: the online network's)."""
        next_target = self.q_target(next_obs).float()
        chooser = self.q_net(next_obs).float() if self.args.double_q else next_target
        best = next_target.gather(2, chooser.argmax(2, keepdim=True)).squeeze(2).sum(1)
        return rewards + discounts * (1.0 - terminated) * best
