"""A SAC plugin (the README's example): critics twice as wide as the actor.

    python main.py --user_dir tests/plugins --model_name wide_critic_sac --gym_id Pendulum-v1
"""
import math

import torch
from torch import nn

from models import register_model
from models.sac import SACModel, Actor, TwinQ, frozen_copy


@register_model("wide_critic_sac")
class WideCriticSAC(SACModel):
    """SAC whose critics are twice as wide as the actor."""

    def build_networks(self, args):
        sizes = args.sac_hidden_sizes
        self.actor = Actor(self.obs_dim, sizes, self.action_dim)
        self.critic = TwinQ(self.obs_dim, [2 * s for s in sizes], self.action_dim)
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha)))
