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

``--target_update_interval K`` (0: off) adds RLlib's APPO target network (IMPACT, Luo et al.
2020, arXiv:1912.00167): pi_target, a copy of the weights refreshed every K learner updates
(``--target_tau``: polyak averaging; 1, a plain copy). V-trace's ratios are then
pi_target / mu, and the surrogate clips min(2, mu / pi_target) * pi / mu, which is
pi / pi_target with the importance weight of the data capped at 2 (RLlib's form): the policy
is held near a target that moves in steps, not near each fragment's own acting policy, whose
lag differs from worker to worker.

The loop is core/algos/appo_trainer.py: rollout workers never wait for the learner.
"""
from typing import NamedTuple, Optional

import torch

from core.argtypes import non_negative_int, positive_float, unit_interval
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
        parser.add_argument("--target_update_interval", type=non_negative_int, default=0,
                            help="learner updates between refreshes of a target network "
                                 "(RLlib's APPO): the V-trace ratios and the clipped ratio "
                                 "are taken against it instead of the acting policy; 0: no "
                                 "target network (default: %(default)s)")
        parser.add_argument("--target_tau", type=unit_interval, default=1.0,
                            help="how far each refresh moves the target network toward the "
                                 "weights: target = tau * weights + (1 - tau) * target "
                                 "(default: %(default)s, a copy)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        if self.value_norm:
            raise ConfigError("--value_norm with --model_name appo: V-trace's targets are "
                              "computed on the learner from the current critic, which has no "
                              "normalized form here yet. Drop --value_norm.")
        # The target network: a copy of the parameters as buffers of a submodule
        # (in get_weights and checkpoints, never in the optimizer); its log-probabilities are
        # the model's own computation with those tensors (torch.func.functional_call).
        self.target_update_interval = args.target_update_interval
        self.target = None
        if self.target_update_interval:
            self.target = TargetParameters(self)

    def after_update(self):
        """Refresh the target network every --target_update_interval updates (called by the
        learner after each optimizer step, before its version counts the step)."""
        if self.target is not None and (self.weights_version + 1) % self.target_update_interval == 0:
            self.target.refresh(self, self.args.target_tau)

    def forward(self, batch: VTraceBatch):
        """log pi(a_t|x_t) of the batch's T * N actions (with the recurrent states replayed):
        what the target network is called for, with its tensors in place of the weights."""
        length, count = batch.rewards.shape
        steps = length * count
        features = self.features(batch.observations)
        actor_input = features
        if self.recurrent:
            actor_input, _ = self.memory_unroll(features, batch.states, batch.episode_starts,
                                               (length + 1, count))
        log_prob, _ = self.policy_terms(actor_input[:steps], batch.actions,
                                        action_mask_of(rows(batch.observations, 0, steps)))
        return log_prob.float()

    def losses_and_gradients(self, batch: VTraceBatch, progress: float = 0.0):
        """V-trace's loss and its gradients: the body of PPOModel.step (inside its
        --ppo_precision autocast)."""
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
        log_prob, entropy = log_prob.float(), entropy.float()  # out of a bf16 autocast
        all_values = self.values(critic_input).float()
        values = all_values[:steps].reshape(length, count)
        with torch.no_grad():
            next_values = torch.cat([values[1:], all_values[steps:steps + count][None]]).detach()
            if len(batch.truncated_index):
                t, n = batch.truncated_index.T
                next_values[t, n] = (batch.truncated_values if batch.truncated_values is not None
                                     else all_values[steps + count:].detach()).to(values.dtype)
            # V-trace's pi: the current policy, or the target network
            reference = (log_prob.detach() if self.target is None
                         else torch.func.functional_call(self, self.target.tensors(), (batch,)))
            log_rhos = (reference - batch.behaviour_log_probs).reshape(length, count)
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
        if self.target is not None:  # min(2, mu / pi_target) * pi / mu (RLlib's APPO)
            weight = (batch.behaviour_log_probs - reference).exp().clamp(max=2.0)
            ratio = weight * ratio
            log_ratio = log_prob - reference
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



class TargetParameters(torch.nn.Module):
    """A model's parameters copied as buffers (numbered: a buffer's name may not hold '.'),
    in the model's state_dict through this submodule: a target network that runs as the
    model itself (``tensors()``, by the parameters' names, for torch.func.functional_call)."""

    def __init__(self, model):
        super().__init__()
        self.names = [name for name, _ in model.named_parameters()]
        for i, (_, param) in enumerate(model.named_parameters()):
            self.register_buffer(f"p{i}", param.detach().clone())

    def tensors(self):
        return {name: getattr(self, f"p{i}") for i, name in enumerate(self.names)}

    @torch.no_grad()
    def refresh(self, model, tau):
        """target <- tau * weights + (1 - tau) * target."""
        targets = [getattr(self, f"p{i}") for i in range(len(self.names))]
        torch._foreach_lerp_(targets, [p.detach() for p in model.parameters()], tau)
