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
    return isinstance(value, PLAIN_TYPES) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "biuf")


def plain_attributes(obj):
    """The attributes of ``obj`` that are plain data (numbers, strings, numeric arrays)."""
    return {k: (v.copy() if isinstance(v, np.ndarray) else v)
            for k, v in vars(obj).items() if is_plain(v)}


def set_attributes(obj, attributes):
    for key, value in attributes.items():
        current = getattr(obj, key, None)
        if isinstance(current, np.ndarray) or isinstance(value, np.ndarray):
            value = np.array(value, dtype=getattr(current, "dtype", None))
        setattr(obj, key, value)
