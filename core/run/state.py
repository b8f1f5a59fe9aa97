"""Run state as plain data, for checkpoints that load with torch.load(weights_only=True).

``to_payload`` turns numpy arrays into tensors (and numpy scalars into Python numbers) so a
state can sit in a torch file next to the weights; ``from_payload`` turns the tensors back into
numpy arrays. RNG states are plain dicts (numpy's ``bit_generator.state``) or byte tensors
(torch's ``get_rng_state``), both allowed by the weights-only unpickler.
"""
import numpy as np
import torch


def to_payload(obj):
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj).copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: to_payload(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_payload(v) for v in obj]
    return obj


def from_payload(obj):
    if isinstance(obj, torch.Tensor):
        return obj.numpy()
    if isinstance(obj, dict):
        return {k: from_payload(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_payload(v) for v in obj]
    return obj


def generator_state(rng):
    """State of a numpy Generator (or None)."""
    return None if rng is None else rng.bit_generator.state


def set_generator_state(rng, state):
    if rng is not None and state is not None:
        rng.bit_generator.state = state


PLAIN_TYPES = (bool, int, float, str, type(None), np.generic)


def is_plain(value):
    """Numbers, strings, numeric arrays, and tuples or lists of them (MountainCar keeps its
    state as a tuple of numpy floats after a step)."""
    if isinstance(value, (tuple, list)):
        return all(is_plain(v) for v in value)
    return isinstance(value, PLAIN_TYPES) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "biuf")


def plain_attributes(obj):
    """The attributes of ``obj`` that are plain data (``is_plain``)."""
    return {k: (v.copy() if isinstance(v, np.ndarray) else v)
            for k, v in vars(obj).items() if is_plain(v)}


def set_attributes(obj, attributes):
    """Set the attributes ``plain_attributes`` gave, as a checkpoint holds them (``from_payload``:
    arrays keep the dtype they were saved in, whatever the object holds now, e.g. Acrobot's
    float32 state after a reset against the float64 one after a step; a tuple comes back as a
    list, made a tuple again where the object holds one, an array where it holds an array)."""
    for key, value in attributes.items():
        current = getattr(obj, key, None)
        if isinstance(value, np.ndarray):
            value = value.copy()
        elif isinstance(value, (list, tuple)) and isinstance(current, np.ndarray):
            value = np.array(value, dtype=current.dtype)
        elif isinstance(value, list) and isinstance(current, tuple):
            value = tuple(value)
        setattr(obj, key, value)
