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

Several policies (envs/pettingzoo_env.py ``--policy_map``): the observation is a Dict {policy
name: Box(its agents, R)}; each policy has its own actor (``GroupWise``: policy p's MLP on its
agents' rows only, so its parameters learn from its own agents' samples and no other's), the
critic is central on every row or, with ``--ma_critic local``, each policy's own on its rows.
``--policy_args NAME=FLAGS`` gives a policy its own --hidden_sizes, --activation and --lr (its
actor and local critic then form an optimizer group of their own). Every agent of one policy
must act in the same space (the head is the policy's).

``--agent_rewards``: every agent learns from its own reward (mixed and competitive games: the
env reports each agent's, core/types.py ``STEP_REPORT_KEY``). The critic then gives a value per
agent (central: one output per agent from every row; local: each row's own), the agent computes
GAE per agent (agents/default_agent.py ``keep_per_agent``) and PPO's ratio, clipping, value and
entropy terms are per (step, agent) pair, counted only where the agent acted: an agent that has
left the episode has no sample, and its values are cut where it left. Without the flag the team
learns from the team's reward with one ratio (the team's log-probability).

Everything else is PPOModel's (models/ppo.py): its flags, the update, schedules, export. The
rows must tell the agents apart where the task needs it (envs/pettingzoo_env.py --agent_ids).
"""
import argparse
import shlex

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Normal

from core.argtypes import checked_text, positive_float
from core.errors import ConfigError
from models import register_model
from envs.pettingzoo_env import STATE
from models.encoders import Flatten
from models.ppo import (ACTIVATIONS, PPOActing, PPOModel, action_mask_of, hidden_sizes, mlp,
                        schedule)


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


class ConcatRows(nn.Module):
    """A Dict {policy: [B, n_p, R]} as one [B, N * R], policies in the Dict's order."""

    def __init__(self, names):
        super().__init__()
        self.names = list(names)

    def forward(self, obs):
        return torch.cat([obs[name].float().reshape(obs[name].shape[0], -1)
                          for name in self.names], dim=1)


class GroupWise(nn.Module):
    """Policy p's network on each of its n_p rows: [B, N * R] (rows grouped by policy, in
    ``names`` order) -> [B, sum_p n_p * out_p]."""

    def __init__(self, names, counts, row_width, nets):
        super().__init__()
        self.names, self.counts, self.row_width = list(names), list(counts), row_width
        self.nets = nn.ModuleDict(nets)

    def forward(self, x):
        width = sum(self.counts) * self.row_width  # (columns past the rows: a global state)
        rows = x[:, :width].reshape(x.shape[0], sum(self.counts), self.row_width)
        outputs, start = [], 0
        for name, count in zip(self.names, self.counts):
            out = self.nets[name](rows[:, start:start + count])
            outputs.append(out.reshape(x.shape[0], -1))
            start += count
        return torch.cat(outputs, dim=1)


class Columns(nn.Module):
    """Columns [start, stop) of [B, F] features: the global state after the rows."""

    def __init__(self, start, stop):
        super().__init__()
        self.start, self.stop = start, stop

    def forward(self, x):
        return x[:, self.start:self.stop]


def team_layout(observation_space):
    """(policy names, agents per policy, row width, a function making a module that flattens
    the rows to [B, N * width], policies in order) of a team's observation: a Box [N, width]
    (one policy, "team") or a Dict of policies' rows (a global state left out)."""
    if isinstance(observation_space, spaces.Dict):
        boxes = policy_boxes(observation_space)
        names = list(boxes)
        return (names, [box.shape[0] for box in boxes.values()],
                next(iter(boxes.values())).shape[1], lambda: ConcatRows(names))
    agents, width = observation_space.shape
    return ["team"], [agents], width, lambda: Flatten(observation_space)


class RowNetworks(nn.Module):
    """Each policy's network on each of its agents' rows, one row at a time: ``outputs(obs)``
    gives, per policy in order, the network's output for its rows as [B, n_p, ...] (a tuple
    of them for a network with several outputs)."""

    def __init__(self, encoder, names, counts, width, nets):
        super().__init__()
        self.encoder = encoder  # the rows as [B, N * width] (observation_space's team_layout)
        self.names, self.counts, self.width = list(names), list(counts), width
        self.nets = nn.ModuleDict(nets)

    def outputs(self, obs):
        x = self.encoder(obs)
        batch, agents = x.shape[0], sum(self.counts)
        rows = x[:, :agents * self.width].reshape(batch, agents, self.width)
        start, found = 0, []
        for name, count in zip(self.names, self.counts):
            out = self.nets[name](rows[:, start:start + count].reshape(batch * count, self.width))
            found.append(tuple(o.reshape(batch, count, *o.shape[1:]) for o in out)
                         if isinstance(out, tuple) else out.reshape(batch, count, *out.shape[1:]))
            start += count
        return found


def policy_boxes(observation_space):
    """{policy: Box(its agents, width)} of a Dict observation, the global state left out."""
    return {name: box for name, box in observation_space.spaces.items() if name != STATE}


class GroupMean(nn.Module):
    """Each policy's value network on its rows, averaged over all rows: [B, N * R] -> [B, 1]."""

    def __init__(self, names, counts, row_width, nets):
        super().__init__()
        self.values = GroupWise(names, counts, row_width, nets)

    def forward(self, x):
        return self.values(x).mean(dim=1, keepdim=True)


def policy_args_entries(text):
    """{name: parsed flags} of ``--policy_args`` (NAME=FLAGS entries separated by semicolons;
    the names are checked against the env's policies when the model is built)."""
    found = {}
    for entry in (e.strip() for e in text.split(";") if e.strip()):
        name, sep, flags = entry.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(f"--policy_args {text!r}: give NAME=FLAGS entries separated by "
                              f"semicolons, such as 'speaker=--hidden_sizes 32,32 --lr 1e-3; "
                              f"listener=--lr 5e-4'.")
        found[name] = parse_policy_flags(name, flags)
    return found


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(message)


def parse_policy_flags(name, flags):
    parser = _Parser(prog=f"--policy_args {name}=", add_help=False)
    parser.add_argument("--hidden_sizes", type=hidden_sizes, default=None)
    parser.add_argument("--activation", choices=sorted(ACTIVATIONS), default=None)
    parser.add_argument("--lr", type=positive_float, default=None)
    try:
        return parser.parse_args(shlex.split(flags))
    except ConfigError as exc:
        raise ConfigError(f"--policy_args {name}={flags!r}: {exc}. A policy takes its own "
                          f"--hidden_sizes, --activation and --lr.") from None


def check_team_spaces(observation_space, action_space, model, single):
    """A one-paragraph ConfigError unless the spaces are a team's (envs/pettingzoo_env.py): a
    Box [agents, width] or a Dict of policies' rows, and a Discrete per agent (one size per
    policy) or a Box [agents, K]; ``model`` names the team model, ``single`` the single-agent
    one to suggest."""
    if isinstance(observation_space, spaces.Dict):
        return check_policy_spaces(observation_space, action_space, model)
    if not (isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 2):
        raise ConfigError(
            f"model {model} takes an observation with a row per agent, a 2-D Box [agents, "
            f"width] (envs/pettingzoo_env.py makes one); this env's is {observation_space}. "
            f"For a single agent use --model_name {single}.")
    agents = observation_space.shape[0]
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = action_space.nvec.reshape(-1)
        if len(nvec) != agents or len(set(nvec.tolist())) != 1:
            raise ConfigError(
                f"model {model}: the team action must be one Discrete(A) per agent, the same "
                f"A for all ({agents} agents); this env's is {action_space}.")
    elif isinstance(action_space, spaces.Box):
        if len(action_space.shape) != 2 or action_space.shape[0] != agents:
            raise ConfigError(
                f"model {model}: a continuous team action is a Box [agents, K] ({agents} "
                f"agents); this env's is {action_space}.")
    else:
        raise ConfigError(
            f"model {model} takes a MultiDiscrete (a Discrete per agent) or a Box [agents, "
            f"K] team action; this env's is {action_space}.")



def check_policy_spaces(observation_space, action_space, model):
    """A Dict {policy: Box(n_p, R)} (--policy_map): one row width, and one action space per
    policy."""
    boxes = policy_boxes(observation_space)
    if not all(isinstance(b, spaces.Box) and len(b.shape) == 2 for b in boxes.values()) \
            or len({b.shape[1] for b in boxes.values()}) != 1:
        raise ConfigError(
            f"model {model} takes a Dict of policies' rows, each a Box [agents, width] of one "
            f"width (envs/pettingzoo_env.py --policy_map makes one); this env's is "
            f"{observation_space}.")
    counts = [b.shape[0] for b in boxes.values()]
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = action_space.nvec.reshape(-1).tolist()
        if len(nvec) != sum(counts):
            raise ConfigError(f"model {model}: {sum(counts)} agents but a team action of "
                              f"{len(nvec)} ({action_space}).")
        start = 0
        for name, count in zip(boxes, counts):
            sizes = nvec[start:start + count]
            if len(set(sizes)) != 1:
                raise ConfigError(
                    f"model {model}: the agents of policy {name!r} act in Discrete spaces of "
                    f"different sizes ({', '.join(map(str, sizes))}); one policy has one "
                    f"action head. Map those agents to different policies (--policy_map).")
            start += count
    elif isinstance(action_space, spaces.Box):
        if len(action_space.shape) != 2 or action_space.shape[0] != sum(counts):
            raise ConfigError(f"model {model}: a continuous team action is a Box [agents, "
                              f"K] ({sum(counts)} agents); this env's is {action_space}.")
    else:
        raise ConfigError(f"model {model} takes a MultiDiscrete (a Discrete per agent) or a "
                          f"Box [agents, K] team action; this env's is {action_space}.")


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
        parser.add_argument("--policy_args", type=checked_text(policy_args_entries), default=None,
                            help="policies' own flags (with the env's --policy_map), entries "
                                 "separated by semicolons: 'NAME=--hidden_sizes 32,32 "
                                 "--activation relu --lr 1e-3; OTHER=--lr 5e-4'")
        parser.add_argument("--agent_rewards", action="store_true",
                            help="each agent learns from its own reward (mixed and competitive "
                                 "games), with a value per agent and PPO's terms per agent; "
                                 "off: the team learns from the team's reward")

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        check_team_spaces(observation_space, action_space, "ma_ppo", "ppo")

    def build_networks(self, args):
        if args.recurrent != "none":
            raise ConfigError(f"--recurrent {args.recurrent} with --model_name ma_ppo: the "
                              f"shared actor has no recurrent form yet. Drop --recurrent.")
        self.agent_rewards = args.agent_rewards
        if self.agent_rewards and args.use_sde:
            raise ConfigError("--agent_rewards with --use_sde: gSDE's exploration is drawn for "
                              "the team action as a whole; drop one of them.")
        self.policy_lrs = {}
        if isinstance(self.observation_space, spaces.Dict):
            return self.build_policies(args)
        if args.policy_args:
            raise ConfigError("--policy_args names policies of the env's --policy_map; this env "
                              "has one policy for every agent (no --policy_map).")
        agents, width = self.observation_space.shape
        sizes = args.hidden_sizes if args.hidden_sizes is not None else [64, 64]
        per_agent = self.action_dim // agents
        self.actor = AgentWise(agents, width, mlp(width, sizes, per_agent, args.activation,
                                                  0.01))
        values = agents if self.agent_rewards else 1
        if args.ma_critic == "central":
            # (the rows arrive flattened when acting, [B, N, R] from the agent's batches)
            self.critic = nn.Sequential(nn.Flatten(), mlp(agents * width, sizes, values,
                                                          args.activation, 1.0))
        elif self.agent_rewards:
            self.critic = AgentWise(agents, width, mlp(width, sizes, 1, args.activation, 1.0))
        else:
            self.critic = AgentMean(agents, width, mlp(width, sizes, 1, args.activation, 1.0))
        if self.head is None:  # Box actions: one log std per entry of the team action
            self.log_std = nn.Parameter(torch.full((self.action_dim,), args.log_std_init))

    def build_policies(self, args):
        """A network per policy of the Dict observation (the module docstring)."""
        check_policy_spaces(self.observation_space, self.action_space, "ma_ppo")
        boxes = policy_boxes(self.observation_space)
        names, counts = list(boxes), [b.shape[0] for b in boxes.values()]
        state = self.observation_space.spaces.get(STATE)
        width = next(iter(boxes.values())).shape[1]
        own = policy_args_entries(args.policy_args) if args.policy_args else {}
        for name in own:
            if name not in boxes:
                raise ConfigError(f"--policy_args {name}=...: no such policy; the env's "
                                  f"--policy_map makes {', '.join(names)}.")
        default_sizes = args.hidden_sizes if args.hidden_sizes is not None else [64, 64]

        def sizes_of(name):
            found = own.get(name)
            return (found.hidden_sizes if found is not None and found.hidden_sizes is not None
                    else default_sizes)

        def activation_of(name):
            found = own.get(name)
            return found.activation if found is not None and found.activation else args.activation
        self.policy_lrs = {name: flags.lr for name, flags in own.items() if flags.lr}
        if isinstance(self.action_space, spaces.MultiDiscrete):
            nvec = self.action_space.nvec.reshape(-1).tolist()
            firsts = np.cumsum([0] + counts[:-1])
            per_agent = {name: int(nvec[first]) for name, first in zip(names, firsts)}
        else:
            per_agent = {name: int(self.action_space.shape[1]) for name in names}
        # (with a global state its columns follow the rows': the actors read the rows only)
        self.encoder = ConcatRows(names + ([STATE] if state is not None else []))
        self.actor = GroupWise(names, counts, width, {
            name: mlp(width, sizes_of(name), per_agent[name], activation_of(name), 0.01)
            for name in names})
        values = sum(counts) if self.agent_rewards else 1
        if state is not None:
            if args.ma_critic != "central":
                raise ConfigError("--global_state with --ma_critic local: the state is for the "
                                  "central critic (each agent's local critic sees its row); use "
                                  "--ma_critic central, or drop --global_state.")
            rows = sum(counts) * width
            self.critic = nn.Sequential(Columns(rows, rows + int(np.prod(state.shape))),
                                        mlp(int(np.prod(state.shape)), default_sizes, values,
                                            args.activation, 1.0))
        elif args.ma_critic == "central":
            self.critic = mlp(sum(counts) * width, default_sizes, values, args.activation, 1.0)
        else:
            kind = GroupWise if self.agent_rewards else GroupMean
            self.critic = kind(names, counts, width, {
                name: mlp(width, sizes_of(name), 1, activation_of(name), 1.0) for name in names})
        if self.head is None:
            self.log_std = nn.Parameter(torch.full((self.action_dim,), args.log_std_init))

    # -- --agent_rewards: values, log-probabilities and entropies per agent -------------------
    def values(self, features):
        if not self.agent_rewards:
            return super().values(features)
        values = self.critic(features)  # [B, N]: no squeeze, a team of one stays [B, 1]
        if self.value_norm:
            values = values * self.return_std() + self.return_mean.float()
        return values

    def policy_terms(self, features, actions, mask=None):
        """Per agent with --agent_rewards: (log-probabilities [B, N], entropies [B, N])."""
        if not self.agent_rewards:
            return super().policy_terms(features, actions, mask)
        return self.agent_terms(self.actor(features), actions, mask)

    def agent_terms(self, params, actions, mask=None):
        """(log-probabilities [B, N], entropies [B, N]) of ``actions`` under the actor's
        output ``params``."""
        rows = params.shape[0]
        agents = self.action_shape[0]
        if self.head is not None:  # a Discrete per agent (one head, a block per agent)
            log_probs, valid = self.head.log_probs(params, mask)  # [B, N, W]
            taken = log_probs.gather(-1, actions.reshape(rows, agents, 1).long()).squeeze(-1)
            terms = log_probs.exp() * log_probs
            if valid is not None:
                terms = torch.where(valid, terms, 0.0)
            return taken, -terms.sum(-1)
        policy = Normal(params, self.log_std.exp().expand_as(params), validate_args=False)
        log_prob = policy.log_prob(actions.reshape(rows, -1)).reshape(rows, agents, -1).sum(-1)
        return log_prob, policy.entropy().reshape(rows, agents, -1).sum(-1)

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False, values=True, state=None,
                       episode_starts=None):
        """PPOModel's actions; with --agent_rewards each agent's log-probability and value
        ([B, N]) instead of the team's."""
        if not self.agent_rewards:
            return super().choose_actions(obs, deterministic, values, state, episode_starts)
        batch = self.flat_obs(obs)
        features = self.features(batch)
        mask = action_mask_of(batch)
        params = self.actor(features)  # one actor pass for the actions and their terms
        if self.head is not None:
            taken = self.head.sample(params, mask, deterministic)[0]
        else:
            noise = torch.zeros_like(params) if deterministic else torch.randn_like(params)
            taken = params + self.log_std.exp() * noise
        extras = {"log_probs": self.agent_terms(params, taken, mask)[0].cpu().numpy()}
        actions = taken.cpu().numpy()
        if self.head is None and len(self.action_shape) != 1:
            actions = actions.reshape(len(actions), *self.action_shape)
        if values:
            extras["values"] = self.values(features).cpu().numpy()
        return actions, extras

    def export_module(self):
        # choose_actions differs from PPOModel's only in the log-probabilities and values it
        # reports; the deterministic action (what an export computes) is PPOModel's
        return PPOActing(self)

    # -- one policy of the team on its own (main.py --export --export_policy NAME) ------------
    def export_parts(self):
        """The policies that export on their own: the Dict observation's names."""
        if isinstance(self.observation_space, spaces.Dict):
            return list(policy_boxes(self.observation_space))
        return []

    def export_part(self, name):
        """(module, observation space, action space) of policy ``name`` alone: its agents'
        rows [B, n, R] in, their deterministic actions out (the argmax of each agent's own
        logits, or its mean), as the team's program computes them for those agents."""
        parts = self.export_parts()
        if name not in parts:
            known = ", ".join(parts) or "none (one policy acts for every agent: export the team)"
            raise ConfigError(f"--export_policy {name!r}: this team's policies are {known}.")
        names = list(policy_boxes(self.observation_space))
        counts = [self.observation_space[n].shape[0] for n in names]
        first = sum(counts[:names.index(name)])
        count = counts[names.index(name)]
        columns = slice(first, first + count)
        if isinstance(self.action_space, spaces.MultiDiscrete):
            nvec = self.action_space.nvec.reshape(-1)[columns]
            start = np.asarray(self.action_space.start).reshape(-1)[columns]
            part_space = spaces.MultiDiscrete(nvec, start=start)
            discrete = int(nvec[0])
        else:
            part_space = spaces.Box(self.action_space.low[columns],
                                    self.action_space.high[columns], dtype=np.float32)
            discrete = 0
        module = PartActing(self.actor.nets[name], count, discrete)
        return module, self.observation_space[name], part_space


    # -- a learning rate per policy (--policy_args NAME='--lr ...') ---------------------------
    def policy_parameters(self, name):
        params = list(self.actor.nets[name].parameters())
        if isinstance(self.critic, GroupMean):
            params += list(self.critic.values.nets[name].parameters())
        elif isinstance(self.critic, GroupWise):
            params += list(self.critic.nets[name].parameters())
        return params

    def configure_optimizer(self):
        if not self.policy_lrs:
            return super().configure_optimizer()
        own = {name: self.policy_parameters(name) for name in self.policy_lrs}
        taken = {id(p) for params in own.values() for p in params}
        groups = [{"params": [p for p in self.parameters() if id(p) not in taken],
                   "lr": self.args.lr, "name": "shared"}]
        groups += [{"params": params, "lr": self.policy_lrs[name], "name": f"policy:{name}"}
                   for name, params in own.items()]
        return torch.optim.Adam(groups, eps=1e-5, fused=True)

    def learning_rate(self, progress):
        if not self.policy_lrs:
            return super().learning_rate(progress)
        rates = {f"policy:{name}": schedule(lr, self.args.lr_schedule, progress)
                 for name, lr in self.policy_lrs.items()}
        return {"shared": super().learning_rate(progress), **rates}

    # -- each policy's return in metrics.csv (envs/pettingzoo_env.py's episode_metrics) -------
    @classmethod
    def metric_columns_of(cls, observation_space):
        if isinstance(observation_space, spaces.Dict):
            return tuple(f"return_{name}" for name in policy_boxes(observation_space))
        return ()

    def observe_episodes(self, episodes):
        columns = self.metric_columns_of(self.observation_space)
        found = {c: [e[c] for e in episodes if c in e] for c in columns}
        return {c: float(np.mean(v)) for c, v in found.items() if v}


class PartActing(nn.Module):
    """One policy's deterministic acting on its agents' rows: its network on each row, the
    argmax of a Discrete agent's logits (``discrete`` actions) or a Box agent's mean."""

    def __init__(self, net, agents, discrete):
        super().__init__()
        self.net, self.agents, self.discrete = net, agents, discrete

    def forward(self, rows):
        out = self.net(rows.float())  # [B, n, A] logits or [B, n, K] means
        return out.argmax(-1) if self.discrete else out
