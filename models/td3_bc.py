"""td3_bc: TD3+BC (Fujimoto and Gu 2021, "A Minimalist Approach to Offline Reinforcement
Learning", arXiv:2106.06860), offline RL for Box actions, with d3rlpy 2.8.1's TD3PlusBC as the
reference for the defaults and the exact form.

TD3 (models/td3.py: its deterministic tanh actor, twin critics with target policy smoothing,
delayed actor and target updates, flags and defaults) with one change, the actor's loss on a
policy update:

    L_pi = -lambda * mean_B Q1(s, pi(s)) + mean_B,A (pi(s) - a)^2,
    lambda = alpha / mean_B |Q1(s, pi(s))|   (detached: a scale, not a path for the gradient)

over the batch's (s, a), a the dataset's action rescaled from the env's bounds into [-1, 1] (the
actor's units), alpha = --td3_bc_alpha (2.5, the paper's and d3rlpy's). Dividing by the
critic's own scale makes alpha a trade-off that holds across reward scales: the paper's one
setting for every D4RL locomotion set. The paper's code and d3rlpy take lambda from Q1 at the
policy's actions, as here; the behaviour cloning term is the mean over the action's dimensions
too (torch's mse_loss; d3rlpy's ((a - pi(s)) ** 2).mean()).

The paper also normalizes the observations by the dataset's mean and std: ``--normalize_obs``
(off by default, as for every ddrl model and d3rlpy's; the harness passes it to both). The
critics, their target and the delay are TD3's untouched; ``--policy_delay`` 2, ``--tau`` 0.005,
``--td3_gamma`` 0.99, ``--target_policy_noise`` 0.2 clipped at 0.5, Adam 3e-4 for both and
batch 256 are d3rlpy's TD3PlusBCConfig defaults as much as TD3's. Two differences to d3rlpy's
update that the flags cannot remove: d3rlpy steps the critics first and values the actor's loss
with the new critic, where ddrl computes both losses from the same weights in one backward pass
(as for TD3, SAC and CQL); and d3rlpy's first actor update is its first update (step 0 of
``grad_step % interval``), ddrl's the ``--policy_delay``-th.

Online (without ``--dataset``, or fine-tuning with ``--offline_ratio`` below 1) the same loss
clones the replay buffer's actions, exploration noise included: what the paper's online
fine-tuning does; ``--td3_bc_alpha`` large makes it TD3 again.
"""
from core.argtypes import positive_float
from models import register_model
from models.td3 import TD3Model


@register_model("td3_bc")
class TD3BCModel(TD3Model):
    """TD3 whose actor also clones the batch's actions, the Q term scaled by its own size."""
    update_metrics = TD3Model.update_metrics + ("bc_loss", "bc_lambda")
    line_metrics = (("critic_loss", "q loss", ".3f"), ("bc_loss", "bc", ".4f"))

    @staticmethod
    def add_args(parser):
        TD3Model.add_args(parser)
        parser.add_argument("--td3_bc_alpha", type=positive_float, default=2.5,
                            help="alpha in the actor's loss -alpha / mean|Q1(s, pi(s))| * "
                                 "mean Q1(s, pi(s)) + mean (pi(s) - a)^2: smaller clones the "
                                 "data more closely, larger trusts the critic more "
                                 "(default: %(default)s, the paper's and d3rlpy's alpha)")

    def actor_loss(self, obs, actions):
        """-lambda mean Q1(s, pi(s)) + mean (pi(s) - a)^2, lambda = alpha / mean |Q1(s, pi(s))|
        detached (module docstring); ``actions``: the batch's, in [-1, 1]."""
        pi, q_pi = self.policy_and_q(obs)
        lam = self.args.td3_bc_alpha / q_pi.abs().mean().detach()
        bc_loss = (pi - actions.float()).pow(2).mean()
        return -lam * q_pi.mean() + bc_loss, {"bc_loss": bc_loss.detach(), "bc_lambda": lam}
