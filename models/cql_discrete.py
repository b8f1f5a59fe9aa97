"""cql_discrete: Conservative Q-Learning (Kumar et al. 2020, arXiv:2006.04779) for Discrete
actions, d3rlpy 2.8.1's DiscreteCQL as the reference; the Box form is models/cql.py (whose
docstring says why the two are registered apart).

cql_discrete (Discrete actions): on DQN, ``DiscreteCQLModel(DQNModel)`` (models/dqn.py: double
DQN, hard target copies, the weighted Huber TD loss), plus --cql_alpha * mean(logsumexp_a
Q(s, a) - Q(s, a_data)) over the actions the observation's mask allows (d3rlpy DiscreteCQL,
alpha 1). Transitions without discounts (a dataset) are discounted by --cql_gamma; dqn_agent's
carry gamma^k from its --gamma.
"""
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from core.argtypes import non_negative_float, unit_interval
from core.errors import ConfigError
from models import register_model
from models.dqn import DQNModel


@register_model("cql_discrete")
class DiscreteCQLModel(DQNModel):
    """CQL for Discrete actions: DQN's double-Q Huber loss plus alpha * mean(logsumexp_a
    Q(s, a) - Q(s, a_data)) over the allowed actions (module docstring)."""
    update_graph_safe = True
    update_metrics = ("q_loss", "q_mean", "td_error_mean", "cql_penalty", "cql_gap", "epsilon")
    line_metrics = (("q_loss", "q loss", ".3f"), ("cql_gap", "gap", ".3f"))

    @staticmethod
    def add_args(parser):
        DQNModel.add_args(parser)
        # d3rlpy DiscreteCQLConfig: learning_rate 6.25e-5, target_update_interval 8000 (a hard
        # copy), its default encoder's two ReLU layers of 256
        parser.set_defaults(dqn_lr=6.25e-5, target_update_interval=8000,
                            dqn_hidden_sizes=[256, 256])
        for action in parser._actions:  # DQN's help names its own default
            if action.dest == "dqn_hidden_sizes":
                action.help = action.help.replace("64,64", "256,256, d3rlpy's")
        parser.add_argument("--cql_alpha", type=non_negative_float, default=1.0,
                            help="weight of the conservative penalty logsumexp_a Q(s, a) - "
                                 "Q(s, a_data) added to the TD loss (default: %(default)s, "
                                 "d3rlpy DiscreteCQL's alpha)")
        parser.add_argument("--cql_gamma", type=unit_interval, default=0.99,
                            help="discount of transitions that carry none of their own (a "
                                 "dataset's one-step transitions); dqn_agent's carry gamma^k "
                                 "from its --gamma (default: %(default)s)")

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        if isinstance(action_space, spaces.Box):
            raise ConfigError(
                f"model {cls.__name__} (cql_discrete) is CQL on DQN, for Discrete actions; this "
                f"env's action space is {action_space}. For continuous actions use "
                f"--model_name cql (CQL on SAC).")
        super().check_spaces(observation_space, action_space)

    def unpack(self, batch):
        """DQN's tensors; transitions without discounts get --cql_gamma on every row."""
        t = getattr(batch, "transitions", batch)
        if t.discounts is None:
            rows = len(t.rewards)
            t = t._replace(discounts=np.full(rows, self.args.cql_gamma, dtype=np.float32))
            batch = batch._replace(transitions=t) if hasattr(batch, "transitions") else t
        return super().unpack(batch)

    def update_loss(self, obs, actions, rewards, next_obs, terminated, discounts, weights):
        """DQN's weighted Huber loss plus the conservative penalty; statistics and |Q - y|."""
        y = self.targets(rewards, next_obs, terminated, discounts)
        q_all = self.q_net(obs).float()
        q = q_all.gather(1, actions.unsqueeze(1)).squeeze(1)
        td_loss = (weights * F.smooth_l1_loss(q, y, reduction="none")).mean()
        gap = (torch.logsumexp(self.masked(q_all, obs), dim=1) - q).mean()
        penalty = self.args.cql_alpha * gap
        td_errors = (q.detach() - y).abs()
        return td_loss + penalty, {"q_loss": td_loss.detach(), "q_mean": q.detach().mean(),
                                   "td_error_mean": td_errors.mean(),
                                   "cql_penalty": penalty.detach(),
                                   "cql_gap": gap.detach()}, td_errors
