"""appo: PPO's actor-critic learning asynchronously, from fragments an older policy sampled,
with V-trace's off-policy correction (core/learning/vtrace.py).

The policy and the networks are PPO's (models/ppo.py: every action space, masks, encoders,
``--recurrent``); what differs is the loss, computed on the learner from whole fragments
(``VTraceBatch``: T steps of N env columns, time-major), with the learner's current weights:

- the values V(x_t) of every step, and of each column's bootstrap observation, come from the
  current critic; V-trace turns them and the importance ratios pi/mu (current policy over the
  one that acted) into value targets v_t and advantages A_t;
- ``--policy_loss appo`` (default; APPO as in Sample Factory and RLlib): PPO's clipped surrogate
  on the ratio pi/mu with the V-trace advantages; ``impala``: IMPALA's policy gradient,
  -A_t * log pi(a_t|x_t) (the ratio only inside A_t, truncated at --vtrace_rho_bar);
- the value loss (v_t - V(x_t))^2 and the entropy bonus, as PPO's.

The loop is core/algos/appo_trainer.py: rollout workers never wait for the learner.
"""
from typing import NamedTuple, Optional

import torch

from core.argtypes import positive_float, unit_interval
from core.errors import ConfigError
from core.learning.vtrace import vtrace
from core.spaces import is_tree
from models import register_model
from models.ppo import PPOModel, action_mask_of, schedule, step_statistics


class VTraceBatch(NamedTuple):
    """Whole fragments for one V-trace step, time-major over T steps of N columns.

    ``observations``: (T + 1) * N rows (row t * N + n: step t of column n; the last N rows are
    the columns' bootstrap observations, after their last step); ``actions`` and
    ``behaviour_log_probs``: T * N rows; ``rewards``, ``terminated``, ``ended`` (terminated or
    truncated) and ``weights`` (1: the step happened; 0: an env failure's cut, kept for the
    shape): [T, N]. A truncation inside the fragment bootstraps from its real final
    observation: ``truncated_index`` [K, 2] (t, n) with ``truncated_observations`` (K rows),
    valued by the learner's critic, or, for a recurrent model (whose state after those steps
    the learner does not replay), ``truncated_values`` [K] the acting critic gave. A recurrent
    model unrolls T + 1 steps from ``states`` (the state before each column's first step)
    with ``episode_starts`` [T + 1, N]."""
    observations: object
    actions: torch.Tensor
    behaviour_log_probs: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    ended: torch.Tensor
    weights: torch.Tensor
    truncated_index: torch.Tensor
    truncated_observations: object
    gamma: float
    normalize_advantage: bool = True
    truncated_values: Optional[torch.Tensor] = None
    states: Optional[dict] = None
    episode_starts: Optional[torch.Tensor] = None


def rows(obs, start, stop=None):
    """Rows [start, stop) of a batch of observations (a tensor or a tree of them)."""
    if is_tree(obs):
        return {k: v[start:stop] for k, v in obs.items()}
    return obs[start:stop]


def cat_rows(first, second):
    if is_tree(first):
        return {k: torch.cat([first[k], second[k]]) for k in first}
    return torch.cat([first, second])


@register_model("appo")
class APPOModel(PPOModel):
    """PPO's networks, V-trace's loss, the asynchronous loop (the module docstring)."""
    trainer = "appo"
    default_agent = "vtrace_agent"

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--policy_loss", choices=["appo", "impala"], default="appo",
                            help="appo: PPO's clipped surrogate on the ratio of the current "
                                 "policy to the one that acted, with V-trace advantages; "
                                 "impala: IMPALA's policy gradient, no clipping "
                                 "(default: %(default)s)")
        parser.add_argument("--vtrace_rho_bar", type=positive_float, default=1.0,
                            help="V-trace's rho-bar: the truncation of the importance ratio in "
                                 "the value targets' TD errors and the advantages "
                                 "(default: %(default)s)")
        parser.add_argument("--vtrace_c_bar", type=positive_float, default=1.0,
                            help="V-trace's c-bar: the truncation of the trace coefficients, "
                                 "how far a TD error flows back (default: %(default)s)")
        parser.add_argument("--vtrace_lambda", type=unit_interval, default=1.0,
                            help="lambda of the traces (IMPALA's remark 2, as GAE's lambda): "
                                 "c_t = lambda * min(c-bar, rho_t) (default: %(default)s)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        if self.value_norm:
            raise ConfigError("--value_norm with --model_name appo: V-trace's targets are "
                              "computed on the learner from the current critic, which has no "
                              "normalized form here yet. Drop --value_norm.")

    def step(self, batch: VTraceBatch, progress: float = 0.0):
        length, count = batch.rewards.shape
        steps = length * count
        observations = batch.observations
        extra = (not self.recurrent and batch.truncated_values is None
                 and len(batch.truncated_index) > 0)
        if extra:  # the truncated steps' final observations, valued in the same pass
            observations = cat_rows(observations, batch.truncated_observations)
        features = self.features(observations)
        actor_input = critic_input = features
        if self.recurrent:  # the columns' states replayed over T + 1 steps
            actor_input, critic_input = self.memory_unroll(
                features, batch.states, batch.episode_starts, (length + 1, count))
        log_prob, entropy = self.policy_terms(
            actor_input[:steps], batch.actions,
            action_mask_of(rows(batch.observations, 0, steps)))
        all_values = self.values(critic_input)
        values = all_values[:steps].reshape(length, count)
        with torch.no_grad():
            next_values = torch.cat([values[1:], all_values[steps:steps + count][None]]).detach()
            if len(batch.truncated_index):
                t, n = batch.truncated_index.T
                next_values[t, n] = (batch.truncated_values if batch.truncated_values is not None
                                     else all_values[steps + count:].detach()).to(values.dtype)
            log_rhos = (log_prob.detach() - batch.behaviour_log_probs).reshape(length, count)
            targets, advantages = vtrace(
                log_rhos, batch.rewards, values.detach(), next_values, batch.terminated,
                batch.ended, batch.gamma, self.args.vtrace_rho_bar, self.args.vtrace_c_bar,
                lam=self.args.vtrace_lambda)
        weights = batch.weights.reshape(steps)
        total = weights.sum().clamp(min=1.0)

        def mean(x):
            return (x * weights).sum() / total

        advantages = advantages.reshape(steps)
        if batch.normalize_advantage and total > 1:
            centred = advantages - mean(advantages)
            advantages = centred / (mean(centred ** 2).sqrt() + 1e-8)
        log_ratio = log_prob - batch.behaviour_log_probs
        ratio = log_ratio.exp()
        clip_range = schedule(self.args.clip_range, self.args.clip_schedule, progress)
        if self.args.policy_loss == "impala":
            policy_loss = -mean(advantages * log_prob)
        else:
            policy_loss = -mean(torch.min(advantages * ratio, advantages * ratio.clamp(
                1.0 - clip_range, 1.0 + clip_range)))
        value_loss = mean((targets.reshape(steps) - values.reshape(steps)) ** 2)
        entropy = mean(entropy)
        loss = policy_loss + self.args.vf_coef * value_loss - self.args.ent_coef * entropy
        self.zero_grad(set_to_none=True)
        loss.backward()
        return self.collect_gradients(), step_statistics(
            mean, ratio, log_ratio, clip_range, policy_loss, value_loss, entropy)

