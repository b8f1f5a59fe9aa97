"""``--env_name none``: a run with no env at all, for a dataset alone (robot logs, a
simulator that is not at hand).

Only an offline run takes it (``--dataset PATH --offline_ratio 1`` with a model of the replay
loop: bc, iql, cql, cql_discrete, td3_bc): its spaces are the dataset's, nothing is evaluated, and the
metrics' losses are the run's report; checkpoints (last.pt, every --checkpoint_interval updates)
hold the weights, the dataset's normalizer and the spaces, so ``ddrl.load`` and export work as
after any run. The loop that knows where spaces come from without an env says so
(``Trainer.spaces_without_env``); every other loop refuses the name in one paragraph.
"""
from core.errors import ConfigError
from envs import register_env


@register_env("none")
class NoEnv:
    """No env: an offline run learns from --dataset alone (the module docstring)."""

    #: nothing to step: the run's spaces come from its loop (core/plugins.py ``steps_an_env``)
    simulates = False

    @staticmethod
    def label(config):
        return "dataset"

    def __init__(self, args, seed=None):
        raise ConfigError(
            "--env_name none has no env to step: the run learned from a dataset alone, so its "
            "policy can be loaded and exported but not evaluated here. Give the env it acts in "
            "(e.g. --env_name gym_env --gym_id ID) to evaluate or record it.")

    def reset(self, seed=None, options=None):
        raise NotImplementedError  # never built: __init__ refuses

    def step(self, action):
        raise NotImplementedError
