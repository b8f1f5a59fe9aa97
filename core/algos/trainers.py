"""The trainer registry: training loops by name, like envs, models and agents.

A model names the loop that drives it (``BaseModel.trainer``). The built-in loops (``ppo``,
``sac``) are registered when this registry is first asked for one; a plugin registers its own
with ``@register_trainer("name")`` on a subclass of core.algos.trainer.Trainer, in a ``--user_dir``
file (or its trainers/ subfolder), and its model sets ``trainer = "name"``.
"""
import importlib

from core.registry import Registry, unknown_name_message
from core.errors import ConfigError
from core.algos.trainer import Trainer

TRAINER_REGISTRY = Registry("trainer", base_class=Trainer, home="core")
register_trainer = TRAINER_REGISTRY.register

# Imported on first use, not here: they import Ray and torch, which `-h` and option errors
# do not need until a model names its loop.
BUILTIN_TRAINER_MODULES = ("core.algos.ppo_trainer", "core.algos.replay_trainer",
                           "core.algos.appo_trainer", "core.algos.offline_trainer")


def trainer_class(name, model_cls=None):
    """The Trainer subclass registered as ``name`` (the one ``model_cls.trainer`` names)."""
    for module in BUILTIN_TRAINER_MODULES:
        importlib.import_module(module)
    if name not in TRAINER_REGISTRY:
        who = f"model {model_cls.__name__}" if model_cls is not None else "the model"
        raise ConfigError(
            f"{who} asks for training loop {name!r} (its class attribute `trainer`), which is "
            f"not registered. " + unknown_name_message("trainer", name, TRAINER_REGISTRY.names())
            .replace(" (--trainer_name)", "")
            + " Register one with @register_trainer(name) from core.algos.trainers.")
    return TRAINER_REGISTRY.get(name)


def check_agent_kind(trainer_cls, plugins, args):
    """The chosen agent is of the kind the model's loop calls (core/algos/agents.py)."""
    kind = trainer_cls.agent_kind
    if kind is not None and not issubclass(plugins.agent_cls, kind):
        raise ConfigError(
            f"--agent_name {args.agent_name} ({plugins.agent_cls.__name__}) is not an "
            f"agents.base.{kind.__name__}, the kind of agent the {trainer_cls.__name__} loop of "
            f"--model_name {args.model_name} calls. Use the model's own agent "
            f"({getattr(plugins.model_cls, 'default_agent', 'default_agent')}) or another "
            f"{kind.__name__}.")
