"""Checkpoints are data, never code: tensors in a torch file loaded with weights_only=True, plus
JSON metadata. Written to a temporary name and renamed, so a crash leaves the last one usable."""
import json
import os

import torch

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
