"""A model whose loss turns NaN for a few updates: the learner must skip them and go on.

    python main.py --user_dir tests/plugins --model_name nan_ppo --nan_steps 20:25
"""
import argparse

import torch

from models import register_model
from models.ppo import PPOModel


def step_range(text):
    try:
        first, last = (int(x) for x in str(text).split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST:LAST, e.g. 20:25") from None
    return first, last


@register_model("nan_ppo")
class NaNPPO(PPOModel):
    """PPO whose loss is NaN on the gradient calls FIRST..LAST-1 of each worker (fault tests)."""

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--nan_steps", type=step_range, default=(20, 25),
                            help="FIRST:LAST: this worker's gradient calls (counted from 0) "
                                 "whose loss is NaN (default: 20:25)")
        parser.add_argument("--raise_at_step", type=int, default=None,
                            help="raise RuntimeError('model bug') on this gradient call: an "
                                 "error no fault handling should swallow (default: never)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        self.calls = 0

    def step(self, batch, progress=0.0):
        if self.args.raise_at_step is not None and self.calls == self.args.raise_at_step:
            raise RuntimeError("model bug")
        first, last = self.args.nan_steps
        poisoned = first <= self.calls < last
        self.calls += 1
        if not poisoned:
            return super().step(batch, progress)
        # The observations carry the NaN through the networks, as a bad input would.
        nan_batch = batch._replace(observations=batch.observations * torch.tensor(float("nan")))
        return super().step(nan_batch, progress)
