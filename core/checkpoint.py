"""Checkpoints are data, never code: tensors in a torch file loaded with weights_only=True, plus
JSON metadata. Written to a temporary name and renamed, so a crash leaves the last one usable.

A file holds "model" (state dict), "optimizer" (state dict), "state" (the run's state as plain
data, core/state.py: workers' observations, unfinished episodes and RNGs, envs' states, the
replay buffer with --checkpoint_buffer) and "format_version"; its .json sidecar holds the
counters, names, resolved configuration and evaluation results.

A run directory's checkpoints/: step-<env steps>.pt every --checkpoint_interval env steps and at
the end (Ctrl-C, SIGTERM, --pause_at_steps included), the newest --keep_checkpoints of them
kept; last.pt, a hard link to the newest; best.pt, the weights of the best evaluation so far.
"""
import json
import os
import re

import torch

from core.registry import ConfigError
from core.state import to_payload

FORMAT_VERSION = 2


def save_checkpoint(path, model_state, optimizer_state=None, meta=None, state=None):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    payload = {"model": {k: torch.tensor(v) for k, v in model_state.items()},
               "format_version": FORMAT_VERSION}
    if optimizer_state is not None:
        payload["optimizer"] = optimizer_state
    if state is not None:
        payload["state"] = to_payload(state)
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


def checkpoint_path(path, flag="--restore"):
    """A checkpoint file, or a run directory meaning its newest (checkpoints/last.pt)."""
    if os.path.isdir(path):
        for candidate in (os.path.join(path, "checkpoints", "last.pt"),
                          os.path.join(path, "last.pt")):
            if os.path.isfile(candidate):
                return candidate
        raise ConfigError(f"{flag} {path}: a directory without checkpoints/last.pt; give a "
                          f"run directory of ddrl or a checkpoint file (.pt).")
    if not os.path.isfile(path):
        raise ConfigError(f"{flag} {path}: no such file or directory.")
    return path


def load_for_restore(path, args, flag="--restore"):
    """(checkpoint file, payload, meta) for --restore, with one-paragraph errors for a file
    that is not a readable ddrl checkpoint or was saved by another model or agent."""
    path = checkpoint_path(path, flag)
    try:
        payload, meta = load_checkpoint(path)
    except Exception as exc:  # truncated, corrupted or crafted: never half-loaded
        raise ConfigError(f"{flag} {path}: not a readable ddrl checkpoint "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). "
                          f"The file may be truncated or corrupted; an older checkpoint "
                          f"(e.g. checkpoints/best.pt) may still load.") from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise ConfigError(f"{flag} {path}: not a ddrl checkpoint (no model state).")
    for key in ("model_name", "agent_name"):
        saved, wanted = meta.get(key), getattr(args, key, None)
        if saved is not None and saved != wanted:
            raise ConfigError(f"{flag} {path}: saved with --{key} {saved}, this run has "
                              f"--{key} {wanted}. Use the same {key.split('_')[0]}.")
    return path, payload, meta


def _link(source, target):
    """Make ``target`` a hard link to ``source``, atomically (a copy where links fail)."""
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        os.link(source, tmp)
    except OSError:
        import shutil
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


class CheckpointManager:
    """Periodic, final and best checkpoints of one run directory (see the module docstring)."""

    def __init__(self, directory, keep=3):
        self.directory = directory
        self.keep = keep

    def step_files(self):
        if not os.path.isdir(self.directory):
            return []
        names = [n for n in os.listdir(self.directory)
                 if re.fullmatch(r"step-\d+\.pt", n)]
        return sorted(names, key=lambda n: int(n[5:-3]))

    def save(self, env_steps, model_state, optimizer_state, meta, state=None):
        """step-<env_steps>.pt (+ .json), last.pt pointing at it, older ones beyond --keep_checkpoints
        removed. Returns the path."""
        name = f"step-{int(env_steps):09d}.pt"
        path = os.path.join(self.directory, name)
        save_checkpoint(path, model_state, optimizer_state, meta, state)
        _link(path, os.path.join(self.directory, "last.pt"))
        _link(f"{path}.json", os.path.join(self.directory, "last.pt.json"))
        for old in self.step_files()[:-self.keep]:
            for file in (old, f"{old}.json"):
                try:
                    os.remove(os.path.join(self.directory, file))
                except FileNotFoundError:
                    pass
        return path

    def save_best(self, model_state, meta, state=None):
        path = os.path.join(self.directory, "best.pt")
        save_checkpoint(path, model_state, None, meta, state)
        return path
