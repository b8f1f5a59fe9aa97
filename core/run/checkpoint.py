"""Checkpoints are data, never code: tensors and plain data in one torch file, loaded with
weights_only=True. Written atomically (core/atomic.py: a temporary name, fsync'ed, then renamed),
so a crash leaves the previous one whole.

A file holds "model" (state dict), "optimizer" (state dict), "state" (the run's state as plain
data, core/run/state.py: workers' observations, unfinished episodes and RNGs, envs' states, the
replay buffer with --checkpoint_buffer), "format_version" and "meta": a JSON string with the
counters, names, resolved configuration and evaluation results. The metadata is inside the file,
so a checkpoint and its metadata cannot be paired wrongly. The <file>.json beside it (and
last.pt.json beside last.pt) is a copy of that metadata for people, written after the file;
ddrl never reads it for format-3 files. Only format-2 files (no embedded "meta") are read with
their .json sidecar.

A run directory's checkpoints/: step-<env steps>.pt every --checkpoint_interval env steps and at
the end (Ctrl-C, SIGTERM, --pause_at_steps included), the newest --keep_checkpoints of them
kept; last.pt, a hard link to the newest; best.pt, the weights of the best evaluation so far.
"""
import json
import os
import re

import torch

from core.atomic import atomic_open, atomic_path
from core.errors import ConfigError
from core.run.state import to_payload

FORMAT_VERSION = 3  # 3: metadata embedded as payload["meta"]; 2: metadata only in <file>.json


def save_checkpoint(path, model_state, optimizer_state=None, meta=None, state=None):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    payload = {"model": {k: torch.tensor(v) for k, v in model_state.items()},
               "format_version": FORMAT_VERSION}
    if optimizer_state is not None:
        payload["optimizer"] = optimizer_state
    if state is not None:
        payload["state"] = to_payload(state)
    text = None
    if meta is not None:
        text = json.dumps({"format_version": FORMAT_VERSION, **meta}, default=str)
        payload["meta"] = text  # a plain str: loads with weights_only=True
    with atomic_open(path, "wb") as f:
        torch.save(payload, f)
    # The copy for people, after the file: ddrl never reads it for format-3 files.
    sidecar = f"{path}.json"
    if text is None:
        try:  # a stale copy from an earlier file of this name would mislead
            os.remove(sidecar)
        except FileNotFoundError:
            pass
        return
    with atomic_open(sidecar, "w") as f:
        json.dump(json.loads(text), f, indent=2)


def embedded_meta(payload):
    """The metadata inside a loaded payload (format 3) as a dict, or None when the payload has
    none (format 2, or saved without metadata). Raises ValueError if it is not a JSON object."""
    if not isinstance(payload, dict) or "meta" not in payload:
        return None
    text = payload["meta"]
    if not isinstance(text, str):
        raise ValueError(f"its metadata is a {type(text).__name__}, not a JSON string")
    meta = json.loads(text)
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    return meta


def payload_format(payload):
    """The payload's format_version (0 when missing or not an integer)."""
    version = payload.get("format_version") if isinstance(payload, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else 0


def load_checkpoint(path):
    """(payload, meta): the saved tensors and the metadata embedded in the file; never unpickles
    code (weights_only=True). The returned payload has no "meta" key. A format-2 file (no
    embedded metadata) takes its metadata from the <path>.json sidecar, {} without one."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    meta = embedded_meta(payload)
    if meta is not None:
        payload.pop("meta")
    else:
        meta = {}
        sidecar = f"{path}.json"
        if payload_format(payload) < 3 and os.path.exists(sidecar):
            with open(sidecar) as f:
                meta = json.load(f)
            if not isinstance(meta, dict):
                raise ValueError(f"{sidecar} is not a JSON object")
    return payload, meta


def check_model_fits(saved_model_state, expected_weights, path, flag="--restore"):
    """Raise a one-paragraph ConfigError unless the checkpoint's "model" state dict has exactly
    the names and shapes of ``expected_weights`` (name -> array of a freshly built model)."""
    def listed(names, cap=5):
        names = sorted(names)
        return ", ".join(names[:cap]) + (f" and {len(names) - cap} more" if len(names) > cap
                                         else "")

    saved, expected = set(saved_model_state), set(expected_weights)
    differences = []
    if expected - saved:
        differences.append(f"missing: {listed(expected - saved)}")
    if saved - expected:
        differences.append(f"unexpected: {listed(saved - expected)}")
    shapes = []
    for name in sorted(saved & expected):
        have = tuple(getattr(saved_model_state[name], "shape", ()))
        want = tuple(getattr(expected_weights[name], "shape", ()))
        if have != want:
            shapes.append(f"{name}: saved {have}, this model {want}")
    if shapes:
        differences.extend(shapes[:5])
        if len(shapes) > 5:
            differences.append(f"{len(shapes) - 5} more shapes differ")
    if differences:
        verb = "Evaluate" if flag == "--evaluate" else "Restore"
        raise ConfigError(f"{flag} {path}: the checkpoint does not fit this model ("
                          + "; ".join(differences) + f"). {verb} with the model flags it was "
                          "trained with (its run's config.yaml).")


def failed_at_start(run_dir):
    """The error line of the run in ``run_dir`` if it failed before its first checkpoint
    (its summary.json says ``failed_at_start``, written by ddrl/session.py, and no checkpoint
    exists), else None."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    if not (isinstance(summary, dict) and summary.get("failed_at_start")):
        return None
    if os.path.exists(os.path.join(run_dir, "checkpoints", "last.pt")):
        return None
    return str(summary.get("error") or "an error")


def checkpoint_path(path, flag="--restore"):
    """A checkpoint file, or a run directory meaning its newest (checkpoints/last.pt)."""
    if os.path.isdir(path):
        for candidate in (os.path.join(path, "checkpoints", "last.pt"),
                          os.path.join(path, "last.pt")):
            if os.path.isfile(candidate):
                return candidate
        failed = failed_at_start(path)
        if failed is not None:
            raise ConfigError(f"{flag} {path}: that run failed at its start, before its first "
                              f"checkpoint ({failed}), so there is nothing to continue. Fix "
                              f"the cause and start it again with --run_dir {path} (its files "
                              f"are replaced).")
        raise ConfigError(f"{flag} {path}: a directory without checkpoints/last.pt; give a "
                          f"run directory of ddrl or a checkpoint file (.pt).")
    if not os.path.isfile(path):
        raise ConfigError(f"{flag} {path}: no such file or directory.")
    return path


def saved_model_path(path, flag="--evaluate"):
    """--evaluate's checkpoint: a file, or a run directory meaning its best model (else its
    newest). ``flag`` names the caller in errors, as the user typed it."""
    if os.path.isdir(path):
        best = os.path.join(path, "checkpoints", "best.pt")
        if os.path.isfile(best):
            return best
    return checkpoint_path(path, flag)


def load_for_restore(path, args, flag="--restore"):
    """(checkpoint file, payload, meta) for --restore, with one-paragraph errors for a file
    that is not a readable ddrl checkpoint or was saved by another model or agent."""
    path = checkpoint_path(path, flag)
    try:
        payload, meta = load_checkpoint(path)
    except Exception as exc:  # noqa: BLE001 - truncated, corrupted or crafted: never half-loaded
        raise ConfigError(f"{flag} {path}: not a readable ddrl checkpoint "
                          f"({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}). "
                          f"The file may be truncated or corrupted; an older checkpoint "
                          f"(e.g. checkpoints/best.pt) may still load.") from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise ConfigError(f"{flag} {path}: not a ddrl checkpoint (no model state).")
    for key, wanted in (("model_name", args.model_name), ("agent_name", args.agent_name)):
        saved = meta.get(key)
        if saved is not None and saved != wanted:
            raise ConfigError(f"{flag} {path}: saved with --{key} {saved}, this run has "
                              f"--{key} {wanted}. Use the same {key.split('_')[0]}.")
    return path, payload, meta


def _link(source, target):
    """Make ``target`` a hard link to ``source``, atomically (a copy where links fail)."""
    with atomic_path(target) as tmp:
        try:
            os.link(source, tmp)
        except OSError:
            import shutil
            shutil.copyfile(source, tmp)


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
        """step-<env_steps>.pt (+ its .json copy), last.pt pointing at it (last.pt.json at the
        copy), older ones beyond --keep_checkpoints removed. Returns the path."""
        name = f"step-{int(env_steps):09d}.pt"
        path = os.path.join(self.directory, name)
        save_checkpoint(path, model_state, optimizer_state, meta, state)
        _link(path, os.path.join(self.directory, "last.pt"))  # it carries its own metadata
        if meta is not None:
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
