"""PQN: parallelised Q-learning without a replay buffer or a target network (Gallici et al.,
"Simplifying Deep Temporal Difference Learning", arXiv:2407.04811; CleanRL's pqn.py).

Many envs step with an epsilon-greedy policy; each round's fragments are the data, as PPO's
are: the targets are Peng's Q(lambda) returns of the fragment,

    R_t = r_t + gamma (1 - done_t) [(1 - lambda) max_a Q(s_{t+1}, a) + lambda R_{t+1}],

bootstrapped at the fragment's end from max_a Q there, and the network regresses Q(s_t, a_t)
on them for --num_epochs passes of minibatches. What keeps that stable without a target network
or a replay buffer is LayerNorm after every hidden layer (--layer_norm, on by default) and the
decorrelation of many parallel envs.

The shape, on ddrl's gradient-collecting loop (core/algos/ppo_trainer.py) with no code of its
own there: the acting model reports ``values`` = max_a Q(s, a) (masked actions excluded), so
agents/default_agent.py's GAE(lambda) over those values gives exactly the returns above
(R_t = A_t + V(s_t); the V(s_t) terms cancel), with --gae_lambda as Q(lambda)'s lambda. A
time-limit truncation bootstraps from the final observation's max Q there (CleanRL's treats it
as a termination). Rollout workers compute each minibatch's gradient of the squared error on
their own fragments, the learner averages and applies them, as for PPO.

Exploration: --exploration linear decays epsilon from --eps_initial to --eps_final over the
first --eps_fraction of --total_steps (the loop tells each worker the run's progress at every
fragment); 'ladder' gives each env slot a constant epsilon of its own (Ape-X). The test worker
acts greedily (or with --eval_eps). Discrete actions (action masks obeyed); any observation an
encoder takes (models/encoders.py: vectors, images, Dict spaces).
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.argtypes import non_negative_float
from models import register_model
from models.dqn import DQNActing, DQNModel, QNetwork, add_epsilon_args
from models.encoders import add_encoder_args, make_encoder
from models.exporting import refuse_changed_acting
from models.ppo import hidden_sizes, on_host, schedule


def layer_norm_mlp(in_dim, sizes):
    """Linear -> LayerNorm -> ReLU for each width in ``sizes`` (PQN's hidden layers)."""
    layers = []
    for width in sizes:
        layers += [nn.Linear(in_dim, width), nn.LayerNorm(width), nn.ReLU()]
        in_dim = width
    return nn.Sequential(*layers)


class PQNNetwork(QNetwork):
    """encoder -> (Linear, LayerNorm, ReLU) x len(sizes) -> one Q value per action (or dueling
    streams); without ``layer_norm`` DQN's plain ReLU MLP."""

    def __init__(self, encoder, sizes, num_actions, dueling, layer_norm):
        super().__init__(encoder, sizes, num_actions, dueling)
        if layer_norm:
            self.trunk = layer_norm_mlp(encoder.features_dim, sizes)
        # CleanRL's and purejaxql's initialisation: orthogonal weights (gain sqrt 2), zero
        # biases, on the layers after the encoder (the encoder keeps its own)
        heads = (self.value, self.advantage) if dueling else (self.q,)
        for module in (*self.trunk, *heads):
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, np.sqrt(2))
                nn.init.zeros_(module.bias)


@register_model("pqn")
class PQNModel(DQNModel):
    """Q(lambda) regression on each round's fragments, LayerNorm, no target network and no
    replay buffer, on the gradient-collecting loop (the module's docstring)."""
    trainer = "ppo"
    default_agent = "default_agent"
    algorithm = "PQN"
    update_graph_safe = False
    precision_flag = None
    update_metrics = ("q_loss", "q_mean", "epsilon")
    line_metrics = (("q_loss", "q loss", ".3f"), ("epsilon", "eps", ".3f"))
    # CleanRL's pqn.py (CartPole): gamma 0.99, Q(lambda) 0.65, 4 epochs of 4 minibatches
    loop_defaults = {"gamma": 0.99, "gae_lambda": 0.65, "num_epochs": 4,
                     "normalize_advantage": False}

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pqn_hidden_sizes", type=hidden_sizes, default=[128, 128],
                            help="widths of the Q network's hidden layers after the encoder, "
                                 "each followed by LayerNorm (--layer_norm) and ReLU "
                                 "(default: 128,128)")
        parser.add_argument("--layer_norm", action=argparse.BooleanOptionalAction, default=True,
                            help="LayerNorm after every hidden layer: what lets PQN learn "
                                 "without a target network (default: on)")
        parser.add_argument("--dueling", action=argparse.BooleanOptionalAction, default=False,
                            help="a value and an advantage stream, Q = V + A - mean(A) "
                                 "(default: off)")
        parser.add_argument("--pqn_lr", type=non_negative_float, default=2.5e-4,
                            help="learning rate (default: %(default)s)")
        parser.add_argument("--pqn_optimizer", choices=["radam", "adam"], default="radam",
                            help="RAdam, as the paper's code and CleanRL's pqn.py, or Adam "
                                 "(default: %(default)s)")
        parser.add_argument("--pqn_lr_schedule", choices=["constant", "linear"],
                            default="linear",
                            help="learning rate over the run: constant, or linear decay to 0 at "
                                 "--total_steps env steps, as CleanRL's anneal_lr "
                                 "(default: %(default)s)")
        parser.add_argument("--max_grad_norm", type=non_negative_float, default=10.0,
                            help="global gradient-norm clip, 0: none (default: %(default)s)")
        parser.add_argument("--exploration", choices=["linear", "ladder"], default="linear",
                            help="epsilon-greedy exploration: 'linear' decays one epsilon over "
                                 "the start of the run, 'ladder' gives every env slot a "
                                 "constant epsilon of its own (Ape-X) (default: %(default)s)")
        add_epsilon_args(parser, eps_fraction=0.5)
        add_encoder_args(parser)

    @classmethod
    def update_precision_of(cls, config):
        return None

    def requested_precision(self):
        return "fp32"

    def build_networks(self, args):
        """The online Q network only: PQN has no target network."""
        self.q_net = PQNNetwork(make_encoder(args, self.observation_space),
                                args.pqn_hidden_sizes, self.num_actions, args.dueling,
                                args.layer_norm)
        self.q_target = None

    # -- acting (on the rollout workers) ---------------------------------------------------
    def choose_actions(self, obs, deterministic=False, values=True):
        """Epsilon-greedy actions (indices from 0), with what the on-policy agent keeps:
        log-probs (zeros: PQN's loss has no ratio) and, with ``values``, max_a Q(s, a) over
        the allowed actions (a rollout worker asks for a fragment's at once instead:
        ``predict_values``)."""
        q = self.acting_q_values(obs, deterministic)
        extras = {"log_probs": np.zeros(len(q), dtype=np.float32)}
        if values:
            extras["values"] = q.max(-1).astype(np.float32)
        return self.epsilon_greedy(q, deterministic), extras

    def predict_values(self, obs, state=None, episode_starts=None):
        """max_a Q(s, a) over the allowed actions, numpy [B]: the value Q(lambda) bootstraps
        from (agents/default_agent.py's GAE over these values is Q(lambda))."""
        return self.q_values(obs).max(-1).astype(np.float32)

    def export_module(self):
        """The greedy action (models/base.py), DQN's acting module on this Q network."""
        refuse_changed_acting(self, PQNModel, DQNModel.ACTING_METHODS)
        return DQNActing(self)

    # -- learning (gradients on the workers, applied by the learner) -------------------------
    def pqn_loss(self, batch):
        """(mean squared error between Q(s_t, a_t) and the Q(lambda) return, its statistics as
        0-d tensors). ``batch``: models/ppo.py's PPOBatch, its ``returns`` the targets."""
        q = self.q_net(self.flat_obs(batch.observations)).float()
        taken = q.gather(1, batch.actions.long().reshape(-1, 1)).squeeze(1)
        loss = F.mse_loss(taken, batch.returns.float())
        return loss, {"q_loss": loss.detach(), "q_mean": taken.detach().mean()}

    def step(self, batch, progress=0.0):
        """The gradients of ``pqn_loss`` on a minibatch, by parameter name, and its statistics
        (epsilon: the linear schedule's at ``progress``, the ladder's mean)."""
        loss, stats = self.pqn_loss(batch)
        self.zero_grad(set_to_none=True)
        loss.backward()
        stats = on_host(stats)
        stats["epsilon"] = self.exploration_now(progress)
        return self.collect_gradients(), stats

    def after_update(self):
        """No target network to follow."""

    def configure_optimizer(self):
        if self.args.pqn_optimizer == "adam":
            return torch.optim.Adam(self.q_net.parameters(), lr=self.args.pqn_lr, fused=True)
        return torch.optim.RAdam(self.q_net.parameters(), lr=self.args.pqn_lr, foreach=True)

    def learning_rate(self, progress):
        return schedule(self.args.pqn_lr, self.args.pqn_lr_schedule, progress)
