"""Checkpoints are data, never code: tensors in a torch file loaded with weights_only=True, plus
JSON metadata. Written to a temporary name and renamed, so a crash leaves the last one usable."""
import json
import os

import torch

from core.registry import ConfigError

FORMAT_VERSION = 1


def save_checkpoint(path, model_state, optimizer_state=None, meta=None):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    payload = {"model": {k: torch.tensor(v) for k, v in model_state.items()},
               "format_version": FORMAT_VERSION}
    if optimizer_state is not None:
        payload["optimizer"] = optimizer_state
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    if meta is not None:
        meta_tmp = f"{path}.json.tmp-{os.getpid()}"
        with open(meta_tmp, "w") as f:
            json.dump({"format_version": FORMAT_VERSION, **meta}, f, indent=2, default=str)
        os.replace(meta_tmp, f"{path}.json")


def load_checkpoint(path):
    """The saved tensors and metadata; never unpickles code (weights_only=True)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    meta_path = f"{path}.json"
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
    return payload, meta


def checkpoint_path(path):
    """A checkpoint file, or a run directory meaning its newest (checkpoints/last.pt)."""
    if os.path.isdir(path):
        for candidate in (os.path.join(path, "checkpoints", "last.pt"),
                          os.path.join(path, "last.pt")):
            if os.path.isfile(candidate):
                return candidate
        raise ConfigError(f"--restore {path}: a directory without checkpoints/last.pt; give a "
                          f"run directory of ddrl or a checkpoint file (.pt).")
    if not os.path.isfile(path):
        raise ConfigError(f"--restore {path}: no such file or directory.")
    return path


def load_for_restore(path, args):
    """(checkpoint file, payload, meta) for --restore, with one-paragraph errors for a file
    that is not a readable ddrl checkpoint or was saved by another model or agent."""
    path = checkpoint_path(path)
    try:
        payload, meta = load_checkpoint(path)
    except Exception as exc:  # truncated, corrupted or crafted: never half-loaded
        raise ConfigError(f"--restore {path}: not a readable ddrl checkpoint "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). "
                          f"The file may be truncated or corrupted; an older checkpoint "
                          f"(e.g. checkpoints/best.pt) may still load.") from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise ConfigError(f"--restore {path}: not a ddrl checkpoint (no model state).")
    for key in ("model_name", "agent_name"):
        saved, wanted = meta.get(key), getattr(args, key, None)
        if saved is not None and saved != wanted:
            raise ConfigError(f"--restore {path}: saved with --{key} {saved}, this run has "
                              f"--{key} {wanted}. Use the same {key.split('_')[0]}.")
    return path, payload, meta
