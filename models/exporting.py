"""What the built-in models' export modules share (models/base.py ``export_module``): the
observation tensors turned into the batch the networks take, and the refusal of a subclass whose
acting path an export module would not follow.

An export module rebuilds its model's deterministic acting path from the model's own
submodules; a subclass that changes that path in a method (its own ``features``, say) would be
exported as its parent acts, silently. It is refused instead, with what to write.
"""
from core.errors import ConfigError


class ObservationInputs:
    """Positional observation tensors -> what a model's networks take, as its ``flat_obs``
    makes it: for a Dict or Tuple space {leaf path: tensor} in the layout's order (the leaves'
    own dtypes); for a Box, float32 [B, features] (``as_vector``: the MLP path) or the
    observation's own dtype [B, *shape] (an encoder's input: uint8 pixels are scaled inside)."""

    def __init__(self, layout, observation_space, as_vector):
        self.paths = list(layout.leaves) if layout.structured else None
        self.shape = None if layout.structured else tuple(observation_space.shape)
        self.as_vector = as_vector
        self.count = len(self.paths) if self.paths is not None else 1

    def __call__(self, inputs):
        """The batch of the first ``count`` of ``inputs`` (the rest: a recurrent state)."""
        if self.paths is not None:
            return dict(zip(self.paths, inputs[:self.count]))
        obs = inputs[0]
        if self.as_vector:
            return obs.float().reshape(obs.shape[0], -1)
        return obs.reshape(obs.shape[0], *self.shape)


def refuse_changed_acting(model, base, methods):
    """A ConfigError when ``model``'s class overrides one of ``methods`` of ``base`` (the
    acting path ``base``'s export module rebuilds) without an export_module of its own."""
    changed = [name for name in methods
               if getattr(type(model), name, None) is not getattr(base, name, None)]
    if changed:
        name = type(model).__name__
        raise ConfigError(
            f"model {name} overrides {base.__name__}.{changed[0]}(), part of the acting path "
            f"that {base.__name__}'s export_module rebuilds from the model's submodules, so an "
            f"export would act as {base.__name__} does rather than as {name} does. Give {name} "
            f"an export_module of its own that follows its {changed[0]}() (models/base.py "
            f"says what it takes and returns).")
