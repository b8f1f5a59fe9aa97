"""main.py --export: a trained policy as one self-contained file, ONNX or a torch.export program
(.pt2), with a JSON sidecar that says how to feed it.

    python main.py --export runs/cartpole --format onnx --out policy.onnx   # + policy.onnx.json
    python main.py --export runs/cartpole/checkpoints/best.pt --format pt2

The file computes what ``Policy.act`` computes (ddrl/policy.py), deterministically: the
observation normalizer of --normalize_obs (its statistics are constants in the file), the
model's deterministic action (models/base.py ``export_module``: the model's own networks,
action masks obeyed), then what the env gets (clipped to a Box's bounds, a Discrete or
MultiDiscrete start added). Inputs are observations as the env gives them, batched: one tensor
for a Box space, one per leaf for a Dict or Tuple space (core/spaces.py paths, the
``action_mask`` leaf included), then for a recurrent policy its state and ``episode_starts``
(bool: these rows begin an episode; their state is reset). Outputs: ``action``, and the next
state. The batch dimension is dynamic; the sidecar FILE.json lists names, shapes and dtypes.

    session = onnxruntime.InferenceSession("policy.onnx")
    action = session.run(None, {"obs": obs[None]})[0][0]
    program = torch.export.load("policy.pt2").module()
    action = program(torch.as_tensor(obs[None]))[0]

No torch.jit anywhere (deprecated in torch 2.13): torch.export traces both formats.
"""
import contextlib
import io
import json
import logging
import os
import re
import warnings

import numpy as np
import torch
from gymnasium import spaces as gym_spaces
from torch import nn

from core.atomic import atomic_open, atomic_path
from core.errors import ConfigError

FORMATS = ("onnx", "pt2")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # the ONNX exporter colours its messages
EXAMPLE_ROWS = 2  # the traced batch: 0 and 1 would be specialized by torch.export
#: the checkpoint metadata the sidecar repeats (the rest: the spaces and flags, given apart)
META_KEYS = ("env_steps", "updates", "wall_time_s", "gym_id", "env_name", "model_name",
             "agent_name", "best_eval_return", "last_eval_return", "eval_return", "run_dir")


class ExportedPolicy(nn.Module):
    """``Policy.act`` around a model's export module, tensors in and out: the env's
    observation -> (Discrete starts off, the normalizer) -> the model's deterministic action
    -> (clipped to a Box's bounds, starts on)."""

    def __init__(self, policy, acting):
        super().__init__()
        self.acting = acting
        self.recurrent = policy.recurrent
        leaves = (list(policy.layout.leaves.values()) if policy.layout.structured else [None])
        self.obs_count = len(leaves)
        statistics = policy.obs_statistics
        self.obs_plan = []  # per observation input: (a start to subtract?, normalized?)
        for index, leaf in enumerate(leaves):
            start = _leaf_start(leaf)
            if start is not None:
                self.register_buffer(f"obs_start_{index}", torch.as_tensor(start))
            moments = (statistics if leaf is None else (statistics or {}).get(leaf.path))
            if moments is not None:
                mean, var = moments
                epsilon = np.float32(1e-8)  # core/learning/normalizer.py normalize's default
                self.register_buffer(f"obs_mean_{index}", torch.as_tensor(mean))
                self.register_buffer(f"obs_scale_{index}", torch.as_tensor(np.sqrt(var + epsilon)))
            self.obs_plan.append((start is not None, moments is not None))
        self.obs_clip = float(policy.args.obs_clip)
        self.action_kind = self._register_action_space(policy.action_space)

    def _register_action_space(self, space):
        """What ``to_env_action`` does to this space's actions: 'clip', 'start' or None."""
        if isinstance(space, gym_spaces.Box):
            self.register_buffer("action_low", torch.as_tensor(np.asarray(space.low)))
            self.register_buffer("action_high", torch.as_tensor(np.asarray(space.high)))
            return "clip"
        if isinstance(space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete)) and np.any(
                space.start):
            self.register_buffer("action_start", torch.as_tensor(np.asarray(space.start)))
            return "start"
        return None

    def forward(self, *inputs):
        count = self.obs_count
        observations = [self._prepare(index, x) for index, x in enumerate(inputs[:count])]
        out = self.acting(*observations, *inputs[count:])
        if not self.recurrent:
            return self._to_env_action(out)
        return (self._to_env_action(out[0]), *out[1:])

    def _prepare(self, index, obs):
        """One observation input as ``Policy.act`` hands it to the model: core/spaces.py's
        encode (a start subtracted), then core/learning/normalizer.py's normalize."""
        shifted, normalized = self.obs_plan[index]
        if shifted:
            obs = obs - getattr(self, f"obs_start_{index}")
        if normalized:
            obs = (obs.float() - getattr(self, f"obs_mean_{index}")) / getattr(
                self, f"obs_scale_{index}")
            obs = obs.clamp(-self.obs_clip, self.obs_clip)
        return obs

    def _to_env_action(self, action):
        """core/sampling/envs.py to_env_action, in tensors."""
        if self.action_kind == "clip":
            action = action.to(self.action_low.dtype)
            return torch.minimum(torch.maximum(action, self.action_low), self.action_high)
        if self.action_kind == "start":
            return action + self.action_start
        return action


def _leaf_start(leaf):
    """The start a Discrete/MultiDiscrete leaf's env values carry (core/spaces.py), or None."""
    start = None if leaf is None else getattr(leaf.space, "start", None)
    if start is None or not np.any(np.asarray(start)):
        return None
    return np.asarray(start, dtype=np.int64)


# -- inputs and outputs ----------------------------------------------------------------------
def input_specs(policy):
    """[{name, role, shape, dtype}] of the exported inputs, in their order (module docstring);
    shapes begin with "batch"."""
    if policy.layout.structured:
        specs = [{"name": leaf.path, "role": "action_mask" if leaf.is_mask else "observation",
                  "shape": ["batch", *leaf.shape], "dtype": np.dtype(leaf.dtype).name}
                 for leaf in policy.layout.leaves.values()]
    else:
        space = policy.observation_space
        specs = [{"name": "obs", "role": "observation", "shape": ["batch", *space.shape],
                  "dtype": np.dtype(space.dtype).name}]
    if policy.recurrent:
        for name, value in policy.model.initial_state(1).items():
            specs.append({"name": f"state/{name}", "role": "state",
                          "shape": ["batch", *np.shape(value)[1:]],
                          "dtype": np.asarray(value).dtype.name})
        specs.append({"name": "episode_starts", "role": "episode_starts", "shape": ["batch"],
                      "dtype": "bool"})
    names = [spec["name"] for spec in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--export: the exported inputs would have the same name twice "
                          f"({', '.join(names)}): an observation key clashes with a state "
                          f"name; rename the key in an env wrapper.")
    return specs


def example_inputs(policy, specs, rows=EXAMPLE_ROWS):
    """Tensors of the inputs' shapes and dtypes to trace with: zeros, the values a Discrete
    leaf starts at, masks allowing every action."""
    leaves = policy.layout.leaves if policy.layout.structured else {}
    tensors = []
    for spec in specs:
        shape = (rows, *spec["shape"][1:])
        value = np.zeros(shape, dtype=spec["dtype"])
        leaf = leaves.get(spec["name"]) if spec["role"] != "state" else None
        if spec["role"] == "action_mask":
            value = np.ones(shape, dtype=spec["dtype"])
        elif leaf is not None and _leaf_start(leaf) is not None:
            value = value + _leaf_start(leaf).astype(value.dtype)
        tensors.append(torch.as_tensor(value))
    return tuple(tensors)


def output_specs(policy, outputs):
    """[{name, role, shape, dtype}] of the exported outputs, from the eager module's."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    names = ["action"] + [f"next_state/{name}" for name in (policy.initial_state(1) or {})]
    return [{"name": name, "role": "action" if name == "action" else "state",
             "shape": ["batch", *tensor.shape[1:]],
             "dtype": str(tensor.dtype).replace("torch.", "")}
            for name, tensor in zip(names, outputs)]


# -- tracing and writing -----------------------------------------------------------------------
#: torch's loggers that talk while tracing: torchvision absent, a failed trace's whole graph
TRACING_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "torch._dynamo",
                   "torch.fx.experimental.symbolic_shapes")


@contextlib.contextmanager
def quiet_tracing():
    """torch.export and the ONNX exporter warn and log about their own internals (deprecations,
    LSTM weights re-assigned while tracing) and print a failed trace's partial graph to
    stderr: nothing a user acts on, a failure being the one paragraph of ``tracing_error``."""
    loggers = [logging.getLogger(name) for name in TRACING_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def trace(module, fmt, args, inputs, outputs):
    """The traced program: an ExportedProgram (pt2) or an ONNXProgram (onnx), batch dynamic."""
    batch = torch.export.Dim("batch", min=1)
    dynamic_shapes = (tuple({0: batch} for _ in args),)  # forward(*inputs): one argument
    with quiet_tracing(), torch.no_grad():
        if fmt == "pt2":
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        return torch.onnx.export(module, args, dynamo=True, verbose=False,
                                 dynamic_shapes=dynamic_shapes,
                                 input_names=[spec["name"] for spec in inputs],
                                 output_names=[spec["name"] for spec in outputs])


def tracing_error(policy, fmt, exc):
    """The one-paragraph ConfigError for a module torch.export or the ONNX exporter refused."""
    name = type(policy.model).__name__
    # past torch.export (the ONNX exporter's first step), a pt2 program may still be written
    translation = fmt == "onnx" and type(exc).__name__ != "TorchExportError"
    while exc.__cause__ is not None:  # the ONNX exporter wraps the error that stopped it
        exc = exc.__cause__
    text = ANSI_ESCAPE.sub("", str(exc)).strip()
    first = " ".join(text.splitlines()[0].split()) if text else ""
    what = "an ONNX graph" if fmt == "onnx" else "a torch.export program"
    other = ("; --format pt2 may still work (the usual cause here is an operator ONNX lacks)"
             if translation else "")
    return ConfigError(
        f"--export --format {fmt}: the acting module of model {name} (its export_module()) "
        f"could not be traced into {what}: {type(exc).__name__}: {first[:300] or '(no message)'}"
        f". The export "
        f"needs a forward of tensor operations only, at any batch size: no numpy, no .item() "
        f"or Python branch on a tensor's values, nothing that fixes the batch size. Change "
        f"{name}.export_module accordingly (models/base.py says what it takes and "
        f"returns){other}.")


def write_program(program, fmt, out):
    """``program`` to ``out``, atomically (a reader sees the old file or the new one)."""
    with atomic_path(out, suffix=f".{fmt}") as tmp:
        if fmt == "pt2":
            torch.export.save(program, tmp)
        else:
            program.save(tmp)


def sidecar(policy, fmt, out, inputs, outputs, program):
    """What FILE.json says: how to feed the file, and what it was exported from."""
    meta = {key: policy.meta[key] for key in META_KEYS if key in policy.meta}
    from core.space_codec import space_to_json
    notes = []
    if getattr(policy.args, "eval_eps", 0):
        notes.append(f"greedy: the run's --eval_eps {policy.args.eval_eps} is left out")
    info = {
        "format": fmt,
        "file": os.path.basename(out),
        "deterministic": True,
        "inputs": inputs,
        "outputs": outputs,
        "observation_space": space_to_json(policy.observation_space),
        "action_space": space_to_json(policy.action_space),
        "recurrent": bool(policy.recurrent),
        "state": [{"name": spec["name"][len("state/"):], "shape": spec["shape"],
                   "dtype": spec["dtype"]} for spec in inputs if spec["role"] == "state"],
        "normalize_obs": policy.obs_statistics is not None,
        "obs_clip": float(policy.args.obs_clip) if policy.obs_statistics is not None else None,
        "model": type(policy.model).__name__,
        "checkpoint": os.path.abspath(policy.path),
        "checkpoint_meta": meta,
        "config": policy.config,
        "policy": getattr(policy, "name", None),  # one policy of a team (--export_policy)
        "torch_version": torch.__version__,
        "notes": notes,
    }
    if fmt == "onnx":
        info["opset"] = int(program.model.opset_imports.get("", 0))
    return info


class PolicyPart:
    """One policy of a team (models/ma_ppo.py ``export_part``) as export_policy reads a
    Policy: that policy's own observation (its agents' rows) and action spaces, no memory, the
    normalizer's statistics of its rows, the run's metadata."""

    def __init__(self, policy, name, observation_space, action_space):
        from core.spaces import layout_of
        self.name = name
        self.observation_space, self.action_space = observation_space, action_space
        self.layout = layout_of(observation_space)
        statistics = policy.obs_statistics
        self.obs_statistics = None if statistics is None else statistics.get(name)
        self.recurrent = False
        self.model, self.meta, self.args = policy.model, policy.meta, policy.args
        self.path, self.config = policy.path, policy.config

    def initial_state(self, batch_size=1):
        return None


def part_of(policy, name):
    """(PolicyPart, its acting module) for ``--export_policy name``."""
    export_part = getattr(policy.model, "export_part", None)
    if export_part is None:
        raise ConfigError(f"--export_policy {name}: model {type(policy.model).__name__} acts as "
                          f"one policy; export it whole (drop --export_policy).")
    module, observation_space, action_space = export_part(name)
    return PolicyPart(policy, name, observation_space, action_space), module


def export_policy(policy, fmt, out, part=None):
    """Write ``policy`` (ddrl/policy.py) to ``out`` as ``fmt`` ("onnx" or "pt2") and its
    sidecar to ``out``.json; returns the sidecar (a dict). ``part``: one policy of a team
    alone (--export_policy). A model without an export_module, or whose module does not
    trace, is a one-paragraph ConfigError."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: one of {', '.join(FORMATS)}.")
    try:
        if part is not None:
            policy, acting = part_of(policy, part)
        else:
            acting = policy.model.export_module()
    except ConfigError as exc:
        raise ConfigError(f"--export --format {fmt}: {exc}") from None
    module = ExportedPolicy(policy, acting).eval()
    inputs = input_specs(policy)
    args = example_inputs(policy, inputs)
    try:
        with torch.no_grad():
            outputs = output_specs(policy, module(*args))
        program = trace(module, fmt, args, inputs, outputs)
    except ConfigError:
        raise
    except Exception as exc:  # any tracing failure is the model's to fix (its own paragraph)
        raise tracing_error(policy, fmt, exc) from exc
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_program(program, fmt, out)
    info = sidecar(policy, fmt, out, inputs, outputs, program)
    with atomic_open(f"{out}.json", "w") as f:
        json.dump(info, f, indent=2, default=_plain)
        f.write("\n")
    return info


def _plain(value):
    """JSON for what a run's flags may hold besides plain data (numpy scalars, tuples)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def default_out(checkpoint, fmt, part=None):
    """The checkpoint's name (and the policy's, for one policy of a team) with the format's
    extension, beside it."""
    return f"{os.path.splitext(checkpoint)[0]}{'' if part is None else '-' + part}.{fmt}"
