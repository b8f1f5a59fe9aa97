"""Training loops by name; a model names the one that drives it (BaseModel.trainer)."""
import importlib

from core.registry import ConfigError

TRAINERS = {"ppo": ("core.ppo_trainer", "PPOTrainer"), "sac": ("core.sac_trainer", "SACTrainer")}


def trainer_module(name):
    if name not in TRAINERS:
        raise ConfigError(f"the model asks for training loop {name!r}; ddrl has "
                          f"{', '.join(sorted(TRAINERS))}. Set the model class's `trainer`.")
    return importlib.import_module(TRAINERS[name][0])


def trainer_class(name):
    return getattr(trainer_module(name), TRAINERS[name][1])
