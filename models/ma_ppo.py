"""ma_ppo: PPO for a team of agents whose observation has a row per agent (envs/pettingzoo_env.py),
one policy network shared by every agent, each acting on its own row alone.

- Actor: ``AgentWise``: the same MLP applied to each agent's row, [B, N, R] -> [B, N, A]
  (parameter sharing: Gupta et al. 2017; MAPPO, Yu et al. 2022), flattened to the team action's
  parameters in agent order (a MultiDiscrete's logits, or a Box's means, one row per agent).
  The team's log-probability is the sum of the agents'; PPO clips the team's ratio.
- Critic: ``--ma_critic central`` (default): an MLP on every agent's row at once, a centralized
  value of the team's state (MAPPO's centralized critic; in MPE the agents' observations together
  hold the global state); ``--ma_critic local``: the shared MLP on each row, the team's value the
  mean of the agents'.

Everything else is PPOModel's (models/ppo.py): its flags, the update, schedules, export. The
rows must tell the agents apart where the task needs it (envs/pettingzoo_env.py --agent_ids).
"""
import torch
from gymnasium import spaces
from torch import nn

from core.registry import ConfigError
from models import register_model
from models.ppo import PPOModel, mlp


class AgentWise(nn.Module):
    """One network applied to each of N rows: [B, N * R] or [B, N, R] -> [B, N * out]."""

    def __init__(self, agents, row_width, net):
        super().__init__()
        self.agents, self.row_width, self.net = agents, row_width, net

    def forward(self, x):
        rows = x.reshape(x.shape[0], self.agents, self.row_width)
        return self.net(rows).reshape(x.shape[0], -1)


class AgentMean(nn.Module):
    """One network's scalar per row, averaged over the rows: [B, N * R] or [B, N, R] ->
    [B, 1]."""

    def __init__(self, agents, row_width, net):
        super().__init__()
        self.agents, self.row_width, self.net = agents, row_width, net

    def forward(self, x):
        rows = x.reshape(x.shape[0], self.agents, self.row_width)
        return self.net(rows).mean(dim=1)


@register_model("ma_ppo")
class TeamPPOModel(PPOModel):
    """PPO with one actor shared by every agent of a team (a row each) and a centralized or
    per-agent critic."""

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--ma_critic", choices=["central", "local"], default="central",
                            help="the critic: an MLP on every agent's row at once (central, "
                                 "MAPPO) or the mean of a shared MLP on each row (local) "
                                 "(default: %(default)s)")

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        if not (isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 2):
            raise ConfigError(
                f"model ma_ppo takes an observation with a row per agent, a 2-D Box [agents, "
                f"width] (envs/pettingzoo_env.py makes one); this env's is {observation_space}. "
                f"For a single agent use --model_name ppo.")
        agents = observation_space.shape[0]
        if isinstance(action_space, spaces.MultiDiscrete):
            nvec = action_space.nvec.reshape(-1)
            if len(nvec) != agents or len(set(nvec.tolist())) != 1:
                raise ConfigError(
                    f"model ma_ppo: the team action must be one Discrete(A) per agent, the same "
                    f"A for all ({agents} agents); this env's is {action_space}.")
        elif isinstance(action_space, spaces.Box):
            if len(action_space.shape) != 2 or action_space.shape[0] != agents:
                raise ConfigError(
                    f"model ma_ppo: a continuous team action is a Box [agents, K] ({agents} "
                    f"agents); this env's is {action_space}.")
        else:
            raise ConfigError(
                f"model ma_ppo takes a MultiDiscrete (a Discrete per agent) or a Box [agents, "
                f"K] team action; this env's is {action_space}.")

    def build_networks(self, args):
        if args.recurrent != "none":
            raise ConfigError(f"--recurrent {args.recurrent} with --model_name ma_ppo: the "
                              f"shared actor has no recurrent form yet. Drop --recurrent.")
        agents, width = self.observation_space.shape
        sizes = args.hidden_sizes if args.hidden_sizes is not None else [64, 64]
        per_agent = self.action_dim // agents
        self.actor = AgentWise(agents, width, mlp(width, sizes, per_agent, args.activation,
                                                  0.01))
        if args.ma_critic == "central":
            # (the rows arrive flattened when acting, [B, N, R] from the agent's batches)
            self.critic = nn.Sequential(nn.Flatten(), mlp(agents * width, sizes, 1,
                                                          args.activation, 1.0))
        else:
            self.critic = AgentMean(agents, width, mlp(width, sizes, 1, args.activation, 1.0))
        if self.head is None:  # Box actions: one log std per entry of the team action
            self.log_std = nn.Parameter(torch.full((self.action_dim,), args.log_std_init))
