"""gymnasium spaces as plain JSON data and back: what a checkpoint's metadata says about the
observations and actions its policy takes (ddrl/policy.py builds the model from it without
making an env; an exported policy's sidecar describes its inputs with it).

Box, Discrete, MultiDiscrete, MultiBinary, and Dict and Tuple of those; anything else raises
ValueError (the caller then falls back on making the env).
"""
import numpy as np
from gymnasium import spaces


def _flat_bound(array):
    """A Box bound as JSON: one number when every entry is the same (images), else the values
    flattened; infinities as strings (JSON has none)."""
    values = np.asarray(array, dtype=np.float64).ravel()
    as_json = [value if np.isfinite(value) else ("inf" if value > 0 else "-inf")
               for value in (values[:1] if (values == values[0]).all() else values).tolist()]
    return as_json[0] if len(as_json) == 1 else as_json


def space_to_json(space):
    """``space`` as a dict of plain data (lists, numbers, strings)."""
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": _flat_bound(space.low), "high": _flat_bound(space.high)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist(),
                "start": np.asarray(space.start).tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {key: space_to_json(sub)
                                           for key, sub in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(sub) for sub in space.spaces]}
    raise ValueError(f"no JSON form for {type(space).__name__} spaces ({space})")


def space_from_json(data):
    """The space ``space_to_json`` described."""
    kind = data["type"]
    if kind == "Box":
        dtype, shape = np.dtype(data["dtype"]), tuple(data["shape"])

        def bound(values):
            if not isinstance(values, list):
                return np.full(shape, float(values))
            return np.array([float(v) for v in values], dtype=np.float64).reshape(shape)
        return spaces.Box(low=bound(data["low"]).astype(dtype), high=bound(data["high"]).astype(dtype),
                          shape=shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=np.dtype(data["dtype"]),
                                    start=np.asarray(data["start"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict({key: space_from_json(sub) for key, sub in data["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from_json(sub) for sub in data["spaces"]])
    raise ValueError(f"unknown space type {kind!r} in a checkpoint's metadata")
