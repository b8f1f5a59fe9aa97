"""ppo_rnd: PPO with exploration by Random Network Distillation (Burda, Edwards, Storkey and
Klimov 2018, "Exploration by Random Network Distillation", arXiv:1810.12894), for vector
observations, with CleanRL's ppo_rnd_envpool.py as the reference for the form.

A fixed, randomly initialised target network f maps an observation to ``--rnd_output_dim``
features; a predictor network f^ learns to match it on the observations the policy visits. The
intrinsic reward of a step is the predictor's error on the state it led to,

    r_int(s') = mean_k (f^(s')_k - f(s')_k)^2,

large where the agent has seldom been. The policy learns from both rewards through two value
heads on the same features (the paper's two streams): the extrinsic one episodic as PPO's, the
intrinsic one non-episodic (an episode's end does not end the search for novelty), each with
its own GAE, the advantages combined as ``--ext_coef`` A_ext + ``--int_coef`` A_int
(agents/rnd_agent.py computes them on each rollout worker). Intrinsic rewards are divided by the
running standard deviation of their discounted sum (the paper's normalization), whose moments
the learner merges from every worker's fragments (``observe_round``) and hands back with the
weights. The predictor is trained on a random ``--rnd_update_proportion`` of each minibatch's
observations (the paper's way to keep it from catching up too fast with many envs).

The paper normalizes the networks' input by running statistics of the observations and clips
it to [-5, 5]: that is ddrl's ``--normalize_obs`` (the observations a fragment carries, and so
those the target and predictor see, are the normalized ones; core/sampling/rollout.py), which
the presets built on this model turn on. Both RND networks are ReLU MLPs of
``--rnd_hidden_sizes``; the target's weights are buffers (checkpointed, sent to every worker,
never stepped), so every process computes the same intrinsic rewards.

Not here yet: image observations (the paper's CNNs on Atari), structured observations, and
``--recurrent``; each is refused with a ConfigError.
"""
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from core.argtypes import non_negative_float, positive_int, unit_interval
from core.errors import ConfigError
from core.learning.normalizer import Moments
from models import register_model
from models.ppo import PPOBatch, PPOModel, hidden_sizes, mlp, on_host
from models.sac import frozen_copy, relu_mlp


class RNDBatch(NamedTuple):
    """A minibatch for ``PPORNDModel.step``: PPO's, plus the intrinsic value head's targets."""
    ppo: PPOBatch
    int_returns: torch.Tensor


def merge_moments(count, mean, var, other_count, other_mean, other_var):
    """(count, mean, variance) of two sets of numbers from each one's: core/learning/
    normalizer.py ``Moments.merge`` (Chan et al.'s parallel update), in variances."""
    merged = Moments(count, mean, var * count).merge(
        Moments(other_count, other_mean, other_var * other_count))
    return merged.count, merged.mean, (merged.m2 / merged.count if merged.count else var)


@register_model("ppo_rnd")
class PPORNDModel(PPOModel):
    """PPO whose advantages add Random Network Distillation's novelty bonus (module docstring)."""
    default_agent = "rnd_agent"
    #: the minibatches it learns from (the PPO loop checks that the agent makes them)
    batch_type = RNDBatch
    # metrics.csv's columns of its own: observe_round's, then its update's statistics
    episode_metrics = ("int_reward_mean", "int_return_std", "int_value_loss", "rnd_loss")

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--rnd_hidden_sizes", type=hidden_sizes, default=[256, 256],
                            help="widths of the RND target's and predictor's hidden layers "
                                 "(default: 256,256)")
        parser.add_argument("--rnd_output_dim", type=positive_int, default=64,
                            help="features the target network maps an observation to "
                                 "(default: %(default)s)")
        parser.add_argument("--rnd_update_proportion", type=unit_interval, default=0.25,
                            help="share of each minibatch's observations the predictor learns "
                                 "from (the paper's 0.25) (default: %(default)s)")
        parser.add_argument("--int_vf_coef", type=non_negative_float, default=0.5,
                            help="coefficient of the intrinsic value head's loss "
                                 "(default: %(default)s, as --vf_coef's)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        if self.encoder is not None or self.obs_dim is None:
            raise ConfigError(
                f"--model_name ppo_rnd takes vector observations (a Box it flattens); this "
                f"env's observation space is {observation_space}. RND on images or structured "
                f"observations is not built yet.")
        if self.recurrent:
            raise ConfigError(f"--model_name ppo_rnd with --recurrent {args.recurrent}: the "
                              f"intrinsic value head has no recurrent form yet. Drop "
                              f"--recurrent.")
        if self.value_norm:
            raise ConfigError("--model_name ppo_rnd with --value_norm: the intrinsic value "
                              "head has no normalized form yet. Drop --value_norm.")
        # the moments of the discounted intrinsic returns over the run (observe_round),
        # travelling with the weights and checkpointed with them
        self.register_buffer("int_return_count", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("int_return_mean", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("int_return_var", torch.tensor(1.0, dtype=torch.float64))

    def build_networks(self, args):
        super().build_networks(args)
        sizes = args.hidden_sizes if args.hidden_sizes is not None else [64, 64]
        self.int_critic = mlp(self.obs_dim, sizes, 1, args.activation, 1.0)
        self.rnd_predictor = relu_mlp(self.obs_dim, args.rnd_hidden_sizes, args.rnd_output_dim)
        target = relu_mlp(self.obs_dim, args.rnd_hidden_sizes, args.rnd_output_dim)
        for layer in target:  # the paper's orthogonal initialisation, gain sqrt(2)
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, np.sqrt(2))
                nn.init.zeros_(layer.bias)
        self.rnd_target = frozen_copy(target)

    # -- what the agent asks of a fragment ----------------------------------------------------
    @torch.no_grad()
    def novelty(self, observations):
        """The predictor's squared error per row, [N] float32 tensor, no gradients."""
        obs = self.flat_obs(observations)
        return (self.rnd_predictor(obs) - self.rnd_target(obs)).pow(2).mean(-1).float()

    def intrinsic_rewards(self, observations):
        """r_int of each row (the observation a step led to), numpy [N]."""
        return self.novelty(observations).cpu().numpy()

    @torch.no_grad()
    def intrinsic_values(self, observations):
        """The intrinsic value head's V_int of each row, numpy [N]."""
        return self.int_critic(self.flat_obs(observations)).squeeze(-1).float().cpu().numpy()

    def int_return_moments(self):
        """(count, mean, variance) of the discounted intrinsic returns merged so far."""
        return (float(self.int_return_count), float(self.int_return_mean),
                float(self.int_return_var))

    @torch.no_grad()
    def observe_round(self, agent_stats):
        """On the learner, after each round: merge the round's discounted intrinsic returns'
        moments (agents/rnd_agent.py's statistics) into the run's; metrics.csv gets the round's
        mean intrinsic reward (before normalization) and the returns' std."""
        stats = [s for s in agent_stats if s.get("int_return_count")]
        if not stats:
            return {}
        count = sum(s["int_return_count"] for s in stats)
        mean = sum(s["int_return_sum"] for s in stats) / count
        var = max(sum(s["int_return_sq_sum"] for s in stats) / count - mean ** 2, 0.0)
        merged = merge_moments(*self.int_return_moments(), count, mean, var)
        for buffer, value in zip((self.int_return_count, self.int_return_mean,
                                  self.int_return_var), merged):
            buffer.fill_(value)
        rewards = sum(s["int_reward_sum"] for s in stats) / count
        return {"int_reward_mean": rewards, "int_return_std": float(np.sqrt(merged[2]))}

    # -- learning ------------------------------------------------------------------------------
    def losses_and_gradients(self, batch: RNDBatch, progress: float = 0.0):
        """PPO's loss on the combined advantages, plus the intrinsic value head's and the
        predictor's, one backward pass."""
        loss, stats = self.ppo_loss(batch.ppo, progress)
        obs = self.flat_obs(batch.ppo.observations)
        int_values = self.int_critic(obs).squeeze(-1).float()
        int_value_loss = (batch.int_returns - int_values).pow(2).mean()
        errors = (self.rnd_predictor(obs) - self.rnd_target(obs)).pow(2).mean(-1).float()
        chosen = (torch.rand(len(errors), device=errors.device)
                  < self.args.rnd_update_proportion).float()
        rnd_loss = (errors * chosen).sum() / chosen.sum().clamp(min=1.0)
        loss = loss + self.args.int_vf_coef * int_value_loss + rnd_loss
        self.zero_grad(set_to_none=True)
        loss.backward()
        return self.collect_gradients(), on_host({**stats,
                                                  "int_value_loss": int_value_loss.detach(),
                                                  "rnd_loss": rnd_loss.detach()})
