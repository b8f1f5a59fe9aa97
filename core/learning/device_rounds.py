"""Updates that never wait on the device: the parameter server's rounds on a GPU (issue 50).

With one learner the parameter server makes ``--updates_per_call`` updates per call
(core/learning/parameter_server.py ``update``). Done one by one, every update waits on the GPU
several times: each column of the batch copied from pageable memory, the statistics read with
``.tolist()``, the TD errors with ``.cpu()``, the gradient norm checked with ``bool``. A 256x256
SAC update is a few hundred small kernels; on an H100 it ran no faster than on 2 CPU threads
(161 against 179 env steps/s; BENCHMARKS.md, "GPU").

A round (``--device_rounds``) makes the same updates with one wait at its end:

- ``stage``: every batch of the call goes to the device at once, from pinned host memory with
  non-blocking copies (``--pin_batches``);
- each update is the model's ``update_on_inputs`` (models/base.py: losses and backward, the
  statistics left as tensors) and ``Learner.apply_on_device`` (the norm, the finite check and
  the optimizer's skip of a bad update all on the device);
- ``RoundResults`` gathers every update's statistics, norm, verdict and TD errors in one tensor
  and copies it to the host once.

``UpdateGraph`` (``--cuda_graphs``) goes further for a model whose update is the same kernels on
tensors of the same shapes every time (``update_graph_safe``): the update's forward and backward
passes are captured once as a CUDA graph and replayed, one launch instead of hundreds; the
optimizer's step and the target networks' update stay eager (a handful of fused kernels).
Measured on an H200 (BENCHMARKS.md, "GPU: device rounds and CUDA graphs"): the waits were not
the cost, the launches were. Rounds alone changed nothing (SAC 7.4 against 6.4 ms an update);
with the graph an update took 1.15 ms (5.6x), DQN's weights equal to the eager rounds'.

On the CPU a round computes what the one-by-one updates compute (the same numbers, a test checks
them) except for one thing the one-by-one path does not do: a skipped update (NaN or inf) still
counts for the model's ``after_update`` (SAC moves its target critics toward the unchanged
critics, DQN counts it toward the next target copy). The weights and the optimizer's state skip
it exactly.
"""
import sys

import numpy as np
import torch

from core.learning.replay_buffer import ReplayBatch


def stage(value, device, pin):
    """``value`` (an array, a dict of arrays, None) as tensors on ``device``. With ``pin`` (a CUDA
    device) each array goes through pinned host memory with a non-blocking copy, so the host
    goes on while the copy runs (from pageable memory every copy waits for the stream)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {key: stage(item, device, pin) for key, item in value.items()}
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=pin)
    array = np.asarray(value)
    if not pin:
        return torch.tensor(array, device=device)  # a copy: arrays from Ray are read-only
    host = torch.empty(array.shape, dtype=torch.from_numpy(array[:0].copy()).dtype,
                       pin_memory=True)
    host.numpy()[...] = array
    # torch's pinned-memory cache keeps the block until the copy has read it
    return host.to(device, non_blocking=True)


def stage_batch(batch, device, pin):
    """A ReplayBatch (or Transitions) with its transitions and weights on ``device``; the slot
    indices and generations stay on the host (they go to the buffer with the priorities)."""
    if isinstance(batch, ReplayBatch):
        return batch._replace(
            transitions=type(batch.transitions)(*(stage(c, device, pin)
                                                  for c in batch.transitions)),
            weights=stage(batch.weights, device, pin))
    return type(batch)(*(stage(c, device, pin) for c in batch))


def _leaves(value):
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value is None else [value]


class UpdateGraph:
    """``model.update_on_inputs`` captured as a CUDA graph on static input tensors of the first
    batch's shapes. Calling it copies a batch's inputs into them, replays the graph and returns
    what ``update_on_inputs`` returns (tensors the next replay overwrites: read them before).
    The gradients land in the same .grad tensors every replay, where the learner steps them.

    Capture follows torch's recipe for a whole network: three eager updates on a side stream
    first (they write .grad only; the weights and the optimizer do not move, the random
    generator does), then the capture."""

    WARMUP = 3

    def __init__(self, model, inputs):
        self.model = model
        self.static = _clone_tree(inputs)
        self.static_leaves = _leaves(self.static)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                model.update_on_inputs(*self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another thread of the process (a test worker acting on the same GPU)
        # may use CUDA while this one captures; its work is simply not captured
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.outputs = model.update_on_inputs(*self.static)
        # the .grad tensors the replays write (an eager update in between replaces them)
        self.grads = [(p, p.grad) for p in model.parameters() if p.grad is not None]

    def fits(self, inputs):
        leaves = _leaves(inputs)
        return len(leaves) == len(self.static_leaves) and all(
            a.shape == b.shape and a.dtype == b.dtype for a, b in zip(leaves, self.static_leaves))

    def __call__(self, inputs):
        for static, leaf in zip(self.static_leaves, _leaves(inputs)):
            static.copy_(leaf, non_blocking=True)
        for param, grad in self.grads:
            param.grad = grad
        self.graph.replay()
        return self.outputs


def _clone_tree(value):
    if isinstance(value, dict):
        return {key: _clone_tree(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_clone_tree(item) for item in value)
    return None if value is None else value.clone()


class RoundResults:
    """Each update's statistics, gradient norm, verdict and TD errors, kept on the device and
    read with one copy to the host at the end of the round (``read``)."""

    def __init__(self):
        self.rows, self.shapes = [], []

    def add(self, scalars, td_errors, norm, applied, extras):
        names = list(scalars)
        parts = [torch.stack([scalars[n].reshape(()).float() for n in names]),
                 norm.reshape(1).float(), applied.reshape(1).float()]
        if td_errors is not None:
            parts.append(td_errors.reshape(-1).float())
        self.rows.append(torch.cat(parts))  # a new tensor: a graph's next replay cannot touch it
        self.shapes.append((names, td_errors is not None, extras))

    def read(self):
        """[(statistics by name with ``extras``, grad norm, applied, |TD errors| or None)]."""
        if not self.rows:
            return []
        flat = torch.cat(self.rows).cpu().numpy()  # the round's one wait on the device
        out, at = [], 0
        for row, (names, has_td, extras) in zip(self.rows, self.shapes):
            values = flat[at:at + row.numel()]
            at += row.numel()
            k = len(names)
            stats = {**dict(zip(names, values[:k].tolist())), **extras}
            out.append((stats, float(values[k]), bool(values[k + 1]),
                        values[k + 2:].copy() if has_td else None))
        return out


def graph_safe(model):
    """Whether the model's own class declares its update graph-safe (``update_graph_safe =
    True`` in its class body): a subclass may change the update (a branch on a counter, state
    written in the forward pass) and a graph would then silently replay the first call's
    choices, so it is safe only when it says so itself."""
    return bool(type(model).__dict__.get("update_graph_safe", False))


def graphs_note(model, device, wanted):
    """Why --cuda_graphs is not used here (None when it is, or when it is not asked)."""
    if wanted == "off":
        return None
    if str(device).split(":")[0] != "cuda":
        return "the learner is not on a CUDA device (--cuda_graphs applies to CUDA only)"
    if not graph_safe(model):
        return (f"model {type(model).__name__} does not declare its update graph-safe "
                f"(update_graph_safe = True in its class body, models/base.py: the same kernels "
                f"on tensors of the same shapes every update, no branch on the host, no state "
                f"written but the gradients)")
    return None


def compile_if_asked(model, wanted):
    """--compile_update on: the model's update_loss compiled (models/base.py
    ``ReplayModelSteps.compile_update``) where its class declares the update graph-safe (a
    branch on a host value would make torch.compile recompile at every change); else a note.
    Returns whether it was compiled."""
    if wanted != "on":
        return False
    if not graph_safe(model) or not hasattr(model, "compile_update"):
        warn(f"--compile_update is not used: model {type(model).__name__} does not declare its "
             f"update graph-safe (update_graph_safe = True in its class body)")
        return False
    model.compile_update()
    return True


def warn(text):
    print(f"ddrl: {text}", file=sys.stderr, flush=True)
