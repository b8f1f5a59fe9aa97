"""rnd_agent: default_agent's GAE with Random Network Distillation's intrinsic reward added
(models/ppo_rnd.py has the method; Burda et al. 2018, arXiv:1810.12894).

On each rollout worker, for a fragment of T steps x E envs:

1. r_int[t, e]: the model's novelty of the observation step t led to (the fragment's next
   observation; after the last step, the observation the next fragment starts from; after an
   episode's end, the next episode's first, as an auto-resetting vector env hands it: the
   intrinsic stream does not stop at episodes);
2. its normalization: each env keeps the discounted running sum of its intrinsic rewards
   (the paper's "reward forward filter", across fragments and episodes, in the worker's
   checkpoint), and r_int is divided by the standard deviation of those sums, over the run's
   rounds so far (the model's buffers, merged on the learner) and this fragment's;
3. A_int: GAE on r_int with the intrinsic value head, ``--int_gamma``, no episode ends;
4. the advantages PPO learns from: ``--ext_coef`` A_ext + ``--int_coef`` A_int (then normalized
   as default_agent's, by --advantage_norm_scope); the extrinsic value head learns the
   extrinsic returns, the intrinsic one the intrinsic returns.

The defaults are the paper's (its Atari setting: extrinsic coefficient 2, intrinsic 1,
intrinsic gamma 0.99).
"""
import numpy as np

from agents import register_agent
from agents.default_agent import DefaultAgent, compute_gae
from core.argtypes import non_negative_float, unit_interval
from core.errors import ConfigError
from models.ppo_rnd import RNDBatch, merge_moments


@register_agent("rnd_agent")
class RNDAgent(DefaultAgent):
    """GAE on the extrinsic and the RND intrinsic reward, combined (module docstring)."""
    #: the minibatches it hands the model (the PPO loop checks that the model takes them)
    batch_type = RNDBatch

    @staticmethod
    def add_args(parser):
        DefaultAgent.add_args(parser)
        parser.add_argument("--int_gamma", type=unit_interval, default=0.99,
                            help="discount factor of the intrinsic rewards, whose stream goes "
                                 "on across episodes (default: %(default)s)")
        parser.add_argument("--ext_coef", type=non_negative_float, default=2.0,
                            help="weight of the extrinsic advantages (default: %(default)s)")
        parser.add_argument("--int_coef", type=non_negative_float, default=1.0,
                            help="weight of the intrinsic advantages (default: %(default)s)")

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        for method in ("intrinsic_rewards", "intrinsic_values", "int_return_moments"):
            if not callable(getattr(model, method, None)):
                raise ConfigError(
                    f"rnd_agent needs a model with Random Network Distillation's intrinsic "
                    f"rewards and values (--model_name ppo_rnd); model {type(model).__name__} "
                    f"has no {method}().")
        self.int_filter = None  # each env's discounted sum of intrinsic rewards
        self.int_returns = None
        self.int_stats = {}

    def send_trajectory(self, trajectory):
        if trajectory.memory is not None or trajectory.values.ndim == 3:
            raise ConfigError("rnd_agent learns one value per step of a model without memory; "
                              "this fragment has a recurrent state or a value per agent.")
        stats = super().send_trajectory(trajectory)
        return {**stats, **self.int_stats}

    def advantages_and_returns(self, trajectory, next_values):
        ext_advantages, ext_returns = super().advantages_and_returns(trajectory, next_values)
        steps, envs = trajectory.rewards.shape
        model = self.model
        observations = np.concatenate([np.asarray(trajectory.observations, np.float32),
                                       np.asarray(trajectory.last_observations,
                                                  np.float32)[None]])
        rows = observations.reshape((steps + 1) * envs, -1)
        rewards = model.intrinsic_rewards(rows[envs:]).reshape(steps, envs).astype(np.float64)
        values = model.intrinsic_values(rows).reshape(steps + 1, envs)
        if self.int_filter is None or len(self.int_filter) != envs:
            self.int_filter = np.zeros(envs)
        filtered = np.empty_like(rewards)
        for t in range(steps):
            self.int_filter = self.int_filter * self.args.int_gamma + rewards[t]
            filtered[t] = self.int_filter
        _, _, var = merge_moments(*model.int_return_moments(), filtered.size, filtered.mean(),
                                  filtered.var())
        normalized = rewards / np.sqrt(max(var, 1e-8))
        no_end = np.zeros((steps, envs), bool)
        int_advantages, self.int_returns = compute_gae(
            normalized, values[:-1], values[1:], no_end, no_end, self.args.int_gamma,
            self.args.gae_lambda)
        self.int_stats = {"int_return_count": int(filtered.size),
                          "int_return_sum": float(filtered.sum()),
                          "int_return_sq_sum": float((filtered ** 2).sum()),
                          "int_reward_sum": float(rewards.sum())}
        advantages = self.args.ext_coef * ext_advantages + self.args.int_coef * int_advantages
        return advantages.astype(np.float32), ext_returns

    def extra_arrays(self):
        return {"int_returns": self.int_returns}

    def model_batch(self, batch, idx):
        return RNDBatch(batch, self.data["int_returns"][idx])

    def get_state(self):
        return {**super().get_state(),
                "int_filter": None if self.int_filter is None else self.int_filter.copy()}

    def set_state(self, state):
        super().set_state(state)
        kept = state.get("int_filter")
        self.int_filter = None if kept is None else np.asarray(kept, np.float64).copy()
