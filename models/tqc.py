"""tqc: Truncated Quantile Critics (Kuznetsov, Shvechikov, Grishin, Vetrov, ICML 2020,
arXiv:2005.04269), SAC whose critics learn the return's distribution and whose targets drop its
top atoms; sb3-contrib's TQC is the reference for the defaults and the exact form.

What differs from models/sac.py (the actor, the temperature, the polyak targets, acting and
export are SAC's):

- **Quantile critics.** ``--n_critics`` networks (default 2), each giving ``--n_quantiles``
  atoms (25) z_1..z_M of the distribution of the return of (s, a), at the fractions
  tau_i = (2i - 1) / 2M.
- **Truncated targets.** The target critics' C x M atoms at (s', a'), a' ~ pi(.|s'), pooled
  and sorted; the largest ``--top_quantiles_to_drop`` per critic (2: 4 of 50) are dropped, and
  each of the K = C (M - d) left gives a target atom
  y_j = r + gamma (1 - terminated) (z_(j) - alpha log pi(a'|s')).
  Dropping the top of the pooled distribution is how TQC keeps overestimation in check, where
  SAC takes the minimum of two critics; d tunes it.
- **Critic loss.** Every atom of every critic against every target atom: the quantile Huber
  loss (kappa 1) averaged over critics, atoms and target atoms (sb3-contrib's
  ``sum_over_quantiles=False``), per transition, then the replay's importance-weighted mean.
- **Actor loss.** alpha log pi(a|s) minus the mean of all C x M atoms at (s, a ~ pi): no
  minimum and no truncation (the paper's).
- |TD error| for priorities and the ``td_error_mean`` column: |mean of the atoms at (s, a) -
  mean of the target atoms|.

The actor and both kinds of critic take ``--sac_hidden_sizes`` (256,256, as sb3-contrib's
default net_arch for both); images get a CNN for the actor and one the critics share, as SAC's.
"""
import torch
from torch import nn

from core.argtypes import non_negative_int, positive_int
from core.errors import ConfigError
from models import register_model
from models.qr_dqn import quantile_fractions, quantile_huber_loss
from models.sac import SACModel, relu_mlp


class QuantileCritics(nn.Module):
    """``n_critics`` independent ReLU MLPs of (s, a), each giving ``n_quantiles`` atoms;
    ``forward`` returns them as [B, n_critics, n_quantiles]. ``encoder``: a module the critics
    share that turns observations into ``obs_dim`` features first (a CNN on images)."""

    def __init__(self, obs_dim, sizes, action_dim, n_critics, n_quantiles, encoder=None):
        super().__init__()
        self.encoder = encoder
        self.nets = nn.ModuleList(relu_mlp(obs_dim + action_dim, sizes, n_quantiles)
                                  for _ in range(n_critics))

    def forward(self, obs, actions):
        if self.encoder is not None:
            obs = self.encoder(obs)
        x = torch.cat([obs, actions], dim=-1)
        return torch.stack([net(x) for net in self.nets], dim=1)


@register_model("tqc")
class TQCModel(SACModel):
    """TQC: SAC with quantile critics whose pooled target distribution loses its top atoms."""

    @staticmethod
    def add_args(parser):
        SACModel.add_args(parser)
        parser.add_argument("--n_quantiles", type=positive_int, default=25,
                            help="atoms of the return's distribution each critic gives "
                                 "(default: %(default)s)")
        parser.add_argument("--n_critics", type=positive_int, default=2,
                            help="quantile critics, each a network of its own "
                                 "(default: %(default)s)")
        parser.add_argument("--top_quantiles_to_drop", type=non_negative_int, default=2,
                            help="atoms dropped from the top of the pooled target distribution, "
                                 "per critic: the larger, the less the critics overestimate "
                                 "(0: no truncation) (default: %(default)s)")

    def build_networks(self, args):
        if args.top_quantiles_to_drop >= args.n_quantiles:
            raise ConfigError(
                f"--top_quantiles_to_drop {args.top_quantiles_to_drop} with --n_quantiles "
                f"{args.n_quantiles}: model tqc drops that many atoms per critic from the top "
                f"of the target distribution and needs at least one left, so "
                f"--top_quantiles_to_drop must be below --n_quantiles (sb3-contrib's defaults: "
                f"25 quantiles, 2 dropped).")
        super().build_networks(args)
        # Each critic's atoms sit at the same fractions: [1, C * M], as the atoms flattened.
        self.register_buffer("atom_fractions", quantile_fractions(args.n_quantiles).repeat(
            args.n_critics).unsqueeze(0), persistent=False)

    def make_critic(self, in_dim, sizes, encoder=None):
        return QuantileCritics(in_dim, sizes, self.action_dim, self.args.n_critics,
                               self.args.n_quantiles, encoder=encoder)

    def policy_value(self, critic_out):
        """The mean of every critic's every atom, [B]."""
        return critic_out.mean(dim=(1, 2))

    @torch.no_grad()
    def critic_targets(self, rewards, next_obs, terminated):
        """The K = C (M - d) target atoms [B, K]: the target critics' atoms at (s', a'),
        a' ~ pi(.|s'), pooled, sorted and cut below the top d per critic, minus alpha log
        pi(a'|s'), discounted behind r."""
        next_actions, next_log_prob = self.sample(next_obs)
        atoms = self.critic_target(next_obs, next_actions).float().flatten(1)
        kept = atoms.shape[1] - self.args.top_quantiles_to_drop * self.args.n_critics
        atoms = torch.sort(atoms, dim=1).values[:, :kept]
        atoms = atoms - self.alpha * next_log_prob.unsqueeze(1)
        return rewards.unsqueeze(1) + ((1.0 - terminated) * self.args.sac_gamma).unsqueeze(1) * atoms

    def critic_loss_and_td_errors(self, obs, actions, target_atoms, weights):
        """(the importance-weighted quantile Huber loss of all critics, mean over critics, atoms
        and target atoms per transition; |mean atom - mean target atom| per transition; the
        mean atom, the critics' Q)."""
        atoms = self.critic(obs, actions).float().flatten(1)  # [B, C * M]
        per_row = quantile_huber_loss(atoms, target_atoms, self.atom_fractions) / atoms.shape[1]
        with torch.no_grad():
            q = atoms.mean(1)
            td_errors = (q - target_atoms.mean(1)).abs()
        return (weights * per_row).mean(), td_errors, q

    @torch.no_grad()
    def td_errors(self, batch):
        """|mean atom - mean target atom| per transition, numpy [B] (an Ape-X explorer's
        initial priorities); draws next actions, so it is stochastic."""
        obs, actions, rewards, next_obs, terminated, _ = self.unpack(batch)
        target_atoms = self.critic_targets(rewards, next_obs, terminated)
        q = self.critic(obs, actions).float().mean(dim=(1, 2))
        return (q - target_atoms.mean(1)).abs().cpu().numpy()

    def update_loss(self, obs, actions, rewards, next_obs, terminated, weights):
        alpha = self.alpha
        target_atoms = self.critic_targets(rewards, next_obs, terminated)
        critic_loss, td_errors, q = self.critic_loss_and_td_errors(obs, actions, target_atoms,
                                                                   weights)
        actor_loss, alpha_loss, log_prob = self.actor_and_alpha_losses(obs, alpha)
        scalars = {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                   "alpha_loss": alpha_loss.detach(), "alpha": alpha.reshape(()),
                   "q_mean": q.mean(), "entropy": -log_prob.detach().mean(),
                   "td_error_mean": td_errors.mean()}
        # no parameter is shared between the three losses' gradient paths (SAC's argument)
        return critic_loss + actor_loss + alpha_loss, scalars, td_errors
