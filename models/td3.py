"""td3: Twin Delayed DDPG (Fujimoto, van Hoof and Meger 2018, arXiv:1802.09477), for Box actions.

A deterministic actor a = tanh(pi(s)) (scaled into the env's bounds), twin Q critics, and target
copies of both. The paper's three changes to DDPG, each a flag:

- **clipped double Q**: the target is r + gamma * (1 - terminated) * min(Q1', Q2')(s', a');
- **target policy smoothing**: a' = clip(pi'(s') + clip(eps, -c, c), -1, 1), eps ~ N(0, sigma)
  (``--target_policy_noise`` sigma, ``--target_noise_clip`` c, in the actor's [-1, 1] units,
  i.e. as fractions of half the action range, as the authors' code scales them by max_action);
- **delayed policy updates**: the actor and both targets move every ``--policy_delay``-th
  critic update (the update's version, as DQN's target copies count: the same in every learner
  worker and after a resume). Between them ``step`` leaves the actor's gradients out and the
  learner does not step it (core/learning/learner.py).

Exploration: Gaussian noise N(0, ``--exploration_noise``) added to the squashed action and
clipped to [-1, 1] (the authors' "expl_noise" 0.1, also in units of half the range); uniform
actions for the first ``--start_steps`` env steps, as every model of the replay loop. The
defaults are the authors' updated ones (github.com/sfujim/TD3: 256 x 256 networks, Adam 3e-4,
batch 256, tau 0.005); ``--learning_starts`` / ``--start_steps`` are the loop's.
"""
import numpy as np
import torch
from torch import nn

from core.argtypes import non_negative_float, positive_int, unit_interval
from models import register_model
from models.encoders import Flatten, add_encoder_args, make_encoder
from models.exporting import ObservationInputs
from models.numpy_mlp import NumpyMLP
from models.ppo import hidden_sizes
from models.sac import BoxReplayModel, TwinQ, frozen_copy, polyak_update, relu_mlp


class DeterministicActor(nn.Module):
    """pi(s): the pre-squash action [B, A] (tanh is applied by the model). ``trunk``: the hidden
    layers (default: a ReLU MLP of ``sizes``; on images a CNN and the MLP)."""

    def __init__(self, obs_dim, sizes, action_dim, trunk=None):
        super().__init__()
        self.trunk = relu_mlp(obs_dim, sizes) if trunk is None else trunk
        self.mu = nn.Linear(sizes[-1] if sizes else obs_dim, action_dim)

    def forward(self, obs):
        return self.mu(self.trunk(obs))


def numpy_deterministic_actor(actor):
    """The built-in actor with a plain MLP trunk as one numpy MLP (models/numpy_mlp.py), or
    None (a CNN trunk, a plugin's own actor)."""
    if type(actor) is not DeterministicActor:
        return None
    return NumpyMLP.of(nn.Sequential(*actor.trunk, actor.mu))


@register_model("td3")
class TD3Model(BoxReplayModel):
    """TD3: deterministic tanh actor, twin critics, target smoothing, delayed policy updates."""
    # the delayed actor update is a branch on the version, a host counter
    update_graph_safe = False
    # the actor and its target are left out between policy updates (their .grad is None)
    partial_gradients = True
    precision_flag = "--td3_precision"
    box_reason = "its actor outputs a point in the action Box and its critics take it as input"
    update_metrics = ("critic_loss", "actor_loss", "q_mean", "td_error_mean")
    line_metrics = (("critic_loss", "q loss", ".3f"), ("q_mean", "q", ".1f"))

    @staticmethod
    def add_args(parser):
        parser.add_argument("--td3_hidden_sizes", type=hidden_sizes, default=[256, 256],
                            help="widths of the actor's and each critic's hidden layers "
                                 "(default: 256,256)")
        parser.add_argument("--actor_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the actor (default: %(default)s)")
        parser.add_argument("--critic_lr", type=non_negative_float, default=3e-4,
                            help="Adam learning rate of the twin critics (default: %(default)s)")
        parser.add_argument("--td3_lr_schedule", choices=["constant", "linear"],
                            default="constant",
                            help="both learning rates over the run: constant, or linear decay "
                                 "to 0 at --total_steps env steps (default: %(default)s)")
        parser.add_argument("--tau", type=unit_interval, default=0.005,
                            help="polyak coefficient of the target actor and critics at every "
                                 "policy update: target = tau * online + (1 - tau) * target "
                                 "(default: %(default)s)")
        parser.add_argument("--td3_gamma", type=unit_interval, default=0.99,
                            help="discount factor of the Bellman target (default: %(default)s)")
        parser.add_argument("--policy_delay", type=positive_int, default=2,
                            help="critic updates per actor and target update "
                                 "(default: %(default)s)")
        parser.add_argument("--exploration_noise", type=non_negative_float, default=0.1,
                            help="std of the Gaussian noise added to the rollout workers' "
                                 "actions, in units of half the action range "
                                 "(default: %(default)s)")
        parser.add_argument("--target_policy_noise", type=non_negative_float, default=0.2,
                            help="std of the noise added to the target actor's actions in the "
                                 "critics' target (target policy smoothing), in units of half "
                                 "the action range (default: %(default)s)")
        parser.add_argument("--target_noise_clip", type=non_negative_float, default=0.5,
                            help="that noise is clipped to [-c, c] (default: %(default)s)")
        parser.add_argument("--td3_precision", choices=["auto", "fp32", "bf16"],
                            default="fp32",
                            help="the update's matrix products in bfloat16 under torch.autocast "
                                 "(bf16), float32 (fp32), or auto: fp32 where bf16 is emulated, "
                                 "else the first update timed in both and the faster kept, as "
                                 "--sac_precision (default: %(default)s)")
        add_encoder_args(parser)

    @classmethod
    def update_precision_of(cls, config):
        return config.td3_precision

    def requested_precision(self):
        return self.args.td3_precision

    def build_networks(self, args):
        """Actor, twin critics and target copies of both. On images each gets a CNN of its own
        (the critics' two heads share theirs), as SAC's."""
        sizes = args.td3_hidden_sizes
        encoder = make_encoder(args, self.observation_space)
        if isinstance(encoder, Flatten):
            self.actor = DeterministicActor(self.obs_dim, sizes, self.action_dim)
            self.critic = TwinQ(self.obs_dim, sizes, self.action_dim)
        else:
            self.image_input = True
            features = encoder.features_dim
            self.actor = DeterministicActor(
                features, sizes, self.action_dim,
                trunk=nn.Sequential(encoder, *relu_mlp(features, sizes)))
            self.critic = TwinQ(features, sizes, self.action_dim,
                                encoder=make_encoder(args, self.observation_space))
        self.actor_target = frozen_copy(self.actor)
        self.critic_target = frozen_copy(self.critic)

    def numpy_actor_of(self, actor):
        return numpy_deterministic_actor(actor)

    # -- policy -------------------------------------------------------------------------------
    def policy(self, obs):
        """tanh(pi(s)), the actor's action in [-1, 1], float32 [B, A]."""
        return torch.tanh(self.actor(obs).float())

    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False):
        """The actor's action, with N(0, --exploration_noise) added and clipped to [-1, 1]
        unless ``deterministic``, in the env's bounds."""
        sigma = 0.0 if deterministic else self.args.exploration_noise
        if self.numpy_acting():
            obs = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
            actions = np.tanh(self.numpy_actor(obs))
            if sigma:
                actions = np.clip(actions + sigma * self.acting_rng.standard_normal(
                    actions.shape, np.float32), -1.0, 1.0)
            actions = (actions * self.action_scale_np + self.action_bias_np).astype(np.float32)
        else:
            actions = self.policy(self.flat_obs(obs))
            if sigma:
                actions = (actions + sigma * torch.randn_like(actions)).clamp(-1.0, 1.0)
            actions = self.to_env_actions(actions).cpu().numpy()
        return actions.reshape(len(actions), *self.action_shape), {}

    def export_module(self):
        """The deterministic action from tensors only (models/base.py): TD3Acting below, on
        this model's own actor."""
        return TD3Acting(self)

    # -- learning -----------------------------------------------------------------------------
    def policy_update_due(self):
        """True when the update being computed also moves the actor and the targets: the
        --policy_delay-th, 2 x --policy_delay-th, ... update, counting from 1. Counted by the
        version of the weights (the learner's, restored from checkpoints; a learner worker's
        from the weights it was handed), before the learner moves on to this update's."""
        return (self.weights_version + 1) % self.args.policy_delay == 0

    @torch.no_grad()
    def critic_targets(self, rewards, next_obs, terminated):
        """r + gamma * (1 - terminated) * min(Q1', Q2')(s', a'), a' the target actor's action
        plus clipped Gaussian noise (target policy smoothing), clipped to [-1, 1]."""
        next_actions = torch.tanh(self.actor_target(next_obs).float())
        noise = (torch.randn_like(next_actions) * self.args.target_policy_noise).clamp(
            -self.args.target_noise_clip, self.args.target_noise_clip)
        next_actions = (next_actions + noise).clamp(-1.0, 1.0)
        next_q = torch.min(*self.critic_target(next_obs, next_actions)).float()
        return rewards + (1.0 - terminated) * self.args.td3_gamma * next_q

    @torch.no_grad()
    def td_errors(self, batch):
        """|Q1(s, a) - target| per transition, numpy [B], without gradients (the initial
        priorities of an Ape-X explorer's block). The smoothing noise makes it stochastic."""
        obs, actions, rewards, next_obs, terminated, _ = self.unpack(batch)
        target_q = self.critic_targets(rewards, next_obs, terminated)
        return (self.critic(obs, actions)[0].float() - target_q).abs().cpu().numpy()

    def update_loss(self, obs, actions, rewards, next_obs, terminated, weights):
        """The critics' loss, plus the actor's on a policy update; statistics and |TD errors|.

        Critics: the importance-weighted squared TD errors of both (0.5 * sum, as SAC's; the
        authors' code sums the two MSEs, twice these gradients, which Adam's steps do not
        tell apart but for its epsilon). Actor: ``actor_loss``, -Q1(s, pi(s)), Q1 taken with
        detached copies of the critic's parameters, so its gradient reaches the actor alone."""
        target_q = self.critic_targets(rewards, next_obs, terminated)
        q1, q2 = (q.float() for q in self.critic(obs, actions))
        critic_loss = 0.5 * ((weights * (q1 - target_q).pow(2)).mean()
                             + (weights * (q2 - target_q).pow(2)).mean())
        total = critic_loss
        scalars = {"critic_loss": critic_loss.detach(), "q_mean": q1.detach().mean()}
        if self.policy_update_due():
            actor_loss, actor_scalars = self.actor_loss(obs, actions)
            total = total + actor_loss
            scalars["actor_loss"] = actor_loss.detach()
            scalars.update(actor_scalars)
        with torch.no_grad():
            td_errors = (q1.detach() - target_q).abs()
        scalars["td_error_mean"] = td_errors.mean()
        return total, scalars, td_errors

    def policy_and_q(self, obs):
        """(pi(s) in [-1, 1], Q1(s, pi(s))), Q1 taken with detached copies of the critic's
        parameters, so a loss of it reaches the actor alone. The built-in critics compute Q1
        alone (a critic of a plugin's own class, whole, its first output taken)."""
        pi = self.policy(obs)
        detached = {name: p.detach() for name, p in self.critic.named_parameters()}
        if isinstance(self.critic, TwinQ):
            q_pi = torch.func.functional_call(self.critic, detached, (obs, pi),
                                              {"first_only": True})
        else:
            q_pi = torch.func.functional_call(self.critic, detached, (obs, pi))[0]
        return pi, q_pi.float()

    def actor_loss(self, obs, actions):
        """(the actor's loss, its extra statistics) on a policy update: -mean Q1(s, pi(s)), the
        deterministic policy gradient's objective (``actions``, the batch's, unused here)."""
        _, q_pi = self.policy_and_q(obs)
        return -q_pi.mean(), {}

    def parameter_groups(self):
        return [
            {"params": list(self.critic.parameters()), "lr": self.args.critic_lr,
             "name": "critic"},
            {"params": list(self.actor.parameters()), "lr": self.args.actor_lr, "name": "actor"},
        ]

    def learning_rate(self, progress):
        """Each group's learning rate at ``progress`` (env steps / total steps); None when
        constant."""
        if self.args.td3_lr_schedule != "linear":
            return None
        scale = 1.0 - min(1.0, max(0.0, progress))
        return {"critic": self.args.critic_lr * scale, "actor": self.args.actor_lr * scale}

    @torch.no_grad()
    def after_update(self):
        """On a policy update, the targets move: target = tau * online + (1 - tau) * target,
        for the actor and both critics (the authors' code; between policy updates they stay)."""
        if self.policy_update_due():
            polyak_update(self.critic_target, self.critic, self.args.tau)
            polyak_update(self.actor_target, self.actor, self.args.tau)


class TD3Acting(nn.Module):
    """TD3's deterministic acting path as a module of tensors only (models/base.py
    ``export_module``): tanh of the actor's output, scaled into the action bounds, as
    ``choose_actions(deterministic=True)`` computes it."""

    def __init__(self, model):
        super().__init__()
        self.inputs = ObservationInputs(model.layout, model.observation_space,
                                        as_vector=not (model.layout.structured
                                                       or model.image_input))
        self.actor = model.actor  # shared with the model
        self.register_buffer("action_scale", model.action_scale.detach().clone())
        self.register_buffer("action_bias", model.action_bias.detach().clone())
        self.action_shape = model.action_shape

    def forward(self, *inputs):
        actions = torch.tanh(self.actor(self.inputs(inputs)).float())
        actions = actions * self.action_scale + self.action_bias
        return actions.reshape(actions.shape[0], *self.action_shape)
