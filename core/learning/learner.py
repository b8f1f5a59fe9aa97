"""The learner: holds the optimizer state, applies averaged gradients, versions the weights."""
import sys
from typing import Dict, Optional, Sequence

import numpy as np
import torch

from core.types import WEIGHTS_VERSION_KEY


def average_gradients(gradients: Sequence[Dict[str, np.ndarray]],
                      weights: Sequence[float]) -> Dict[str, np.ndarray]:
    """Per-parameter average, weighted by each contribution's sample count.

    Every parameter is averaged from its own gradients only: the actor's from the actor's, the
    critic's from the critic's (never one from the other's). With the
    per-worker losses being means, weighting by sample count makes the average equal to the
    gradient of the mean loss over the union of the workers' minibatches.
    """
    if not gradients:
        raise ValueError("no gradients to average")
    keys = set(gradients[0])
    for g in gradients[1:]:
        if set(g) != keys:
            raise ValueError(f"workers returned different parameters: {sorted(keys ^ set(g))}")
    total = float(sum(weights))
    return {k: sum(np.asarray(g[k]) * np.float32(w / total) for g, w in zip(gradients, weights))
            for k in gradients[0]}


# torch._dynamo's import costs 1.6 s of CPU here, a third of a small run's whole process, and a
# process that compiles nothing needs none of it. Yet an optimizer imports it at its first call
# of add_param_group, zero_grad, state_dict or load_state_dict (each wrapped in
# torch._disable_dynamo, which imports it to mark them as not to be traced) and at every step
# (torch.optim's _use_grad imports it to call graph_break, a no-op outside a compiled region).
# Both are skipped below while torch._dynamo is not imported; once something in the process
# compiles (and so imports it), torch's own paths run. The updates are the same: the same step
# function, under no_grad, as _use_grad runs it.


def skip_dynamo_import():
    """Mark the optimizer methods wrapped in torch._disable_dynamo as already resolved to the
    plain method (each wrapper caches the function to call in its ``__dynamo_disable``
    attribute), unless torch._dynamo is imported already."""
    if "torch._dynamo" in sys.modules:
        return
    for attribute in vars(torch.optim.Optimizer).values():
        code = getattr(attribute, "__code__", None)
        plain = getattr(attribute, "__wrapped__", None)
        if (code is not None and plain is not None and code.co_name == "inner"
                and code.co_filename.endswith("_compile.py")
                and getattr(plain, "__dynamo_disable", None) is None):
            setattr(plain, "__dynamo_disable", plain)


def optimizer_step(optimizer):
    """``optimizer.step()``; while torch._dynamo is not imported and the optimizer has no step
    hooks, its class's own step function under no_grad (what torch's wrappers call after
    their profiling label, hooks and the import)."""
    from torch.optim import optimizer as torch_optimizer
    if ("torch._dynamo" in sys.modules or optimizer.defaults.get("differentiable")
            or optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
            or torch_optimizer._global_optimizer_pre_hooks
            or torch_optimizer._global_optimizer_post_hooks):
        return optimizer.step()
    step = type(optimizer).step
    while hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    with torch.no_grad():
        return step(optimizer)


def gradients_finite(gradients: Dict[str, np.ndarray]) -> bool:
    return all(np.isfinite(np.asarray(g)).all() for g in gradients.values())


class Learner:
    def __init__(self, model):
        self.model = model
        skip_dynamo_import()
        self.optimizer = model.configure_optimizer()
        self.version = 0
        self.parameters = dict(model.named_parameters())

    @property
    def version(self):
        """Updates applied (restored from checkpoints); the model's ``weights_version``."""
        return self._version

    @version.setter
    def version(self, value):
        self._version = int(value)
        self.model.weights_version = self._version

    def apply(self, gradients: Dict[str, np.ndarray], progress: float = 0.0) -> Optional[float]:
        """One optimizer step with these gradients (by parameter name; a parameter left out is
        not updated by this step); returns the gradient norm before clipping,
        or None, changing nothing, when a gradient holds NaN or inf (a skipped update: one bad
        batch must not poison the weights and the optimizer's moments)."""
        if not gradients_finite(gradients):
            return None
        unknown = set(gradients) - set(self.parameters)
        if unknown:
            raise ValueError(f"gradients for parameters the model does not have: {sorted(unknown)}")
        for name, param in self.parameters.items():
            # A copy: clipping scales .grad in place and must not touch the caller's arrays.
            # A parameter without a gradient is not stepped (Adam skips a None grad; e.g.
            # CrossQ's actor between its delayed updates), which a zero gradient would not be.
            grad = gradients.get(name)
            param.grad = (None if grad is None
                          else torch.tensor(grad).reshape(param.shape).to(param.device))
        return self._step(progress)

    def apply_in_place(self, progress: float = 0.0) -> Optional[float]:
        """``apply`` for the gradients the model's own ``step`` left in its parameters' .grad
        (computed in this process, inside ``model.gradients_in_place()``): the same update
        without copying them to numpy and back. None, changing nothing, when one is NaN or inf
        (their global norm is then not finite)."""
        stepped = [p for p in self.parameters.values() if p.grad is not None]
        if not stepped:
            return None
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in stepped]))
        if not torch.isfinite(norm):
            return None
        return self._step(progress, norm)

    def apply_on_device(self, scalars, progress: float = 0.0):
        """``apply_in_place`` without waiting on the device (core/learning/device_rounds.py):
        returns (the gradient norm before clipping, whether the update was applied), both as
        tensors on the device. An update whose ``scalars`` (its losses, 0-d tensors) or
        gradients hold NaN or inf changes neither the weights nor the optimizer's state: a fused
        optimizer skips it on the device (its ``found_inf``, as torch.amp's GradScaler uses
        it), though the model's ``after_update`` and the version still count that update;
        any other optimizer makes this one update wait for the check and skips it whole. The
        caller sets the version from the updates it reads were applied."""
        stepped = [p for p in self.parameters.values() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in stepped]))
        finite = torch.isfinite(norm)
        if scalars:
            finite = finite & torch.isfinite(torch.stack([v.reshape(()).float()
                                                         for v in scalars])).all()
        if not self.optimizer.defaults.get("fused"):
            if not bool(finite):  # the one wait: this optimizer cannot skip on the device
                return norm, finite
            self._step(progress, norm, as_tensor=True)
            return norm, finite
        self.optimizer.found_inf = (~finite).to(torch.float32)
        try:
            self._step(progress, norm, as_tensor=True)
        finally:
            del self.optimizer.found_inf
        return norm, finite

    def _step(self, progress, norm=None, as_tensor=False):
        """Learning rates, clipping, the optimizer step and after_update, on the .grad set
        (``norm``: their global norm, if known)."""
        lr = self.model.learning_rate(progress)
        if isinstance(lr, dict):  # by parameter group name (SAC: critic, actor, alpha)
            for group in self.optimizer.param_groups:
                group["lr"] = lr[group["name"]]
        elif lr is not None:  # None: the model keeps the learning rates it configured
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        stepped = [p for p in self.parameters.values() if p.grad is not None]
        max_norm = self.model.max_grad_norm()
        if max_norm:
            norm = torch.nn.utils.clip_grad_norm_(stepped, max_norm)
        elif norm is None:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in stepped]))
        optimizer_step(self.optimizer)
        after_update = getattr(self.model, "after_update", None)
        if after_update is not None:  # e.g. SAC's polyak-averaged target critics
            after_update()
        self.version += 1
        return norm if as_tensor else float(norm)

    def state(self):
        """(weights, optimizer state, version): the learner's part of a checkpoint."""
        return self.model.get_weights(), self.optimizer.state_dict(), self.version

    def load_state(self, weights, optimizer_state=None, version=0):
        """Continue from ``state()``'s parts (a checkpoint's model and optimizer state dicts)."""
        self.model.set_weights(weights)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.version = int(version)

    def get_weights(self):
        """The model's weights as numpy arrays (checkpoints)."""
        return self.model.get_weights()

    def weights_for_workers(self):
        """``get_weights`` carrying their version (core/types.py WEIGHTS_VERSION_KEY): what
        rollout, gradient and test workers get."""
        return {**self.model.get_weights(), WEIGHTS_VERSION_KEY: np.asarray(self.version)}
