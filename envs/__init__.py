"""Environment wrappers. A wrapper follows gymnasium's API and may carry ``@ray.remote``:

    @register_env("my_env")
    @ray.remote            # optional
    class MyEnv:
        @staticmethod
        def add_args(parser): parser.add_argument("--my_flag", type=int, default=1, help="...")
        def __init__(self, args, seed=None): self.observation_space = ...; self.action_space = ...
        def reset(self, seed=None, options=None): return obs, info
        def step(self, action): return obs, reward, terminated, truncated, info
"""
import os
from collections import namedtuple

from core.registry import Registry, import_package_modules, publish
from core.errors import ConfigError

# The 5-tuple a wrapper's step returns; a plain tuple in the same order works as well.
OBSERVATION = namedtuple("OBSERVATION", ["obs", "reward", "terminated", "truncated", "info"])


def _check_env_class(cls):
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"env class {cls.__qualname__} lacks {', '.join(missing)}: an env "
                          f"wrapper follows gymnasium's API (reset, step, observation_space, "
                          f"action_space).")


ENV_REGISTRY = publish(Registry("env", check=_check_env_class, home=__name__))
register_env = ENV_REGISTRY.register

import_package_modules(__name__, os.path.dirname(__file__))
