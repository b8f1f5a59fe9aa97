"""custom_model: an example that subclasses ppo and changes the network.

The actor and the critic share a trunk here (ppo keeps them apart), and a flag sets the trunk's
width. Everything else (loss, optimizer, schedules) is inherited from ppo.
"""
import torch
from torch import nn

from core.argtypes import positive_int
from models import register_model
from models.ppo import PPOModel, mlp, ACTIVATIONS


class SharedTrunkHead(nn.Module):
    def __init__(self, trunk, head):
        super().__init__()
        self.trunk, self.head = trunk, head

    def forward(self, x):
        return self.head(self.trunk(x))


@register_model("custom_model")
class SharedTrunkPPO(PPOModel):
    """PPO with a shared actor-critic trunk (--trunk_width); an example of subclassing ppo."""

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--trunk_width", type=positive_int, default=64,
                            help="width of the shared trunk's two layers (default: %(default)s)")

    def build_networks(self, args):
        width = args.trunk_width
        trunk = nn.Sequential(nn.Linear(self.obs_dim, width), ACTIVATIONS[args.activation](),
                              nn.Linear(width, width), ACTIVATIONS[args.activation]())
        self.actor = SharedTrunkHead(trunk, mlp(width, [], self.action_dim, args.activation, 0.01))
        self.critic = SharedTrunkHead(trunk, mlp(width, [], 1, args.activation, 1.0))
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((self.action_dim,), args.log_std_init))
