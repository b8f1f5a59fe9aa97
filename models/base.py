"""The model contract. A model is a torch module that owns its loss: ``step(batch)`` returns
gradients and never applies them (the learner holds the optimizer and applies the average)."""
import contextlib
import inspect
import weakref
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from core.errors import ConfigError
from core.types import WEIGHTS_VERSION_KEY

Gradients = Dict[str, np.ndarray]
Weights = Dict[str, np.ndarray]


def host_stats(scalars, td_errors, extras):
    """``update_on_inputs``' results as ``step`` returns its statistics: the scalars as
    floats (one copy to the host for all of them: on a GPU each .item() would wait on its
    own), then ``extras``, then "td_errors" as numpy [B] (when there are any)."""
    names = list(scalars)
    stats = dict(zip(names, torch.stack([scalars[n].reshape(()) for n in names]).tolist()))
    stats.update(extras)
    if td_errors is not None:
        stats["td_errors"] = td_errors.cpu().numpy()
    return stats


class TimedPrecision:
    """A model whose update may run under bf16 autocast, chosen by a flag of its own
    (``precision_flag``, e.g. --sac_precision) that takes fp32, bf16 or auto: 'auto' is fp32
    where bf16 is emulated (core/distributed/devices.py resolve_precision); where it is native,
    the first update is timed on a copy of the model in both precisions and the faster kept
    (``time_precisions``), both figures on stderr and in ``precision_timings``. The model gives
    ``requested_precision()`` and ``losses_and_gradients(*inputs)`` (one whole update on its own
    weights, its gradients into .grad, under whatever autocast the caller set), and runs its
    update inside ``autocast(inputs)``."""
    precision_flag = "--precision"

    def requested_precision(self) -> str:
        raise NotImplementedError

    def timed_update(self, inputs):
        return self.losses_and_gradients(*inputs)

    def update_precision(self, device_type, inputs=None):
        """The precision resolved for the device that computes the update. Without ``inputs``
        nothing is measured and an 'auto' that would measure answers bf16 uncached (the first
        batch still measures)."""
        cached = getattr(self, "_update_precision", None)
        if cached is not None and cached[0] == device_type:
            return cached[1]
        from core.distributed.devices import resolve_precision
        requested = self.requested_precision()
        chosen = resolve_precision(requested, device_type)
        if requested == "auto" and chosen == "bf16":
            if inputs is None:
                return chosen
            chosen = self.measure_precision(device_type, inputs)
        self._update_precision = (device_type, chosen)
        return chosen

    def measure_precision(self, device_type, inputs):
        """'auto' where bf16 is native: the faster precision for this update on this device,
        timed on a copy of the model (its gradients and any running statistics stay apart)."""
        import copy
        import sys
        from core.distributed.devices import time_precisions
        probe = copy.deepcopy(self)
        choice, ms = time_precisions(lambda: probe.timed_update(inputs), self.device)
        self.precision_timings = {"device": device_type, "chosen": choice,
                                  "fp32_ms": round(ms["fp32"], 3), "bf16_ms": round(ms["bf16"], 3)}
        print(f"ddrl: {self.precision_flag} auto on {device_type}: {choice} (an update took "
              f"{ms['fp32']:.2f} ms in fp32 and {ms['bf16']:.2f} ms in bf16, timed on the "
              f"first batch)", file=sys.stderr, flush=True)
        return choice

    def autocast(self, inputs):
        """The autocast context of an update on ``inputs`` in the chosen precision."""
        device_type = self.device.type
        return torch.autocast(device_type, dtype=torch.bfloat16,
                              enabled=self.update_precision(device_type, inputs) == "bf16")


#: a model's compiled ``update_loss`` (--compile_update), kept outside the model so that
#: copies of it (deepcopy, pickling for Ray) carry no compiled code
_COMPILED_LOSSES = weakref.WeakKeyDictionary()


class ReplayModelSteps:
    """``step`` and ``update_on_inputs`` for a model that learns from replay through
    ``update_inputs``, ``update_loss`` and ``update_extras``: the loss's backward pass, the
    gradients (only the parameters that got one, with ``partial_gradients``) and the statistics
    on the host."""
    #: True when an update may leave some parameters without a gradient (CrossQ's actor
    #: between its delayed updates): those are left out rather than sent as zeros
    partial_gradients = False

    def update_loss(self, *inputs):
        """(the loss to minimize, statistics as 0-d tensors by name, |TD errors| [B] or None)
        on ``update_inputs``' tensors, without a backward pass or a copy to the host."""
        raise NotImplementedError

    def compile_update(self, **options):
        """Compile ``update_loss`` with torch.compile (``options`` go to it); the backward pass
        then runs the code AOTAutograd derived. Compiling happens at the first update."""
        _COMPILED_LOSSES[self] = torch.compile(self.update_loss, **options)

    def losses_and_gradients(self, *inputs):
        """``update_loss`` (compiled, after ``compile_update``) and its backward pass into the
        parameters' .grad: (statistics, |TD errors|)."""
        loss, scalars, td_errors = _COMPILED_LOSSES.get(self, self.update_loss)(*inputs)
        self.zero_grad(set_to_none=True)
        loss.backward()
        return scalars, td_errors

    def update_on_inputs(self, *inputs):
        return self.losses_and_gradients(*inputs)

    def step(self, batch, progress=0.0):
        scalars, td_errors = self.update_on_inputs(*self.update_inputs(batch))
        stats = host_stats(scalars, td_errors, self.update_extras(progress))
        return self.collect_gradients(skip_none=self.partial_gradients), stats


class BaseModel(nn.Module):
    #: which training loop drives this model ("ppo": gradient collecting; "replay":
    #: the Ape-X-shaped off-policy loop; core/algos/trainers.py)
    trainer = None
    #: a reason the model cannot learn from several learners' averaged gradients, or None
    single_learner_only = None
    #: the agent used when --agent_name is not given
    default_agent = "default_agent"
    #: the version of the weights this model holds: set by the learner that steps it, or by
    #: ``set_weights`` from weights a learner handed out (WEIGHTS_VERSION_KEY); 0 at start
    weights_version = 0
    #: whether the policy has memory (a recurrent core; models/recurrent.py). A recurrent model
    #: gives ``initial_state(n)``, and its ``choose_actions`` (and PPO's ``predict_values``)
    #: take ``state`` and ``episode_starts`` and return the next state (see choose_actions).
    #: Rollout workers, the test worker, --evaluate and videos carry the state per env slot
    #: (core/sampling/memory.py); core never asks which model it is.
    recurrent = False
    #: defaults of this model's own for its training loop's flags ({dest: value}), applied
    #: after the loop adds them; a preset and the command line still override them (r2d2's
    #: replay rows are sequences: its batch size and buffer count sequences)
    loop_defaults = {}
    #: the statistics of ``step`` a loop that lists them (the replay loop) puts in metrics.csv,
    #: in this order
    update_metrics = ()
    #: which of them the terminal line shows, as (column, label, format) triples
    line_metrics = ()
    #: the columns ``observe_episodes`` fills in metrics.csv, in this order
    episode_metrics = ()

    @classmethod
    def metric_columns_of(cls, observation_space):
        """``observe_episodes``'s columns for a run on ``observation_space`` (a model whose
        columns depend on the env overrides it: models/ma_ppo.py, a return per policy)."""
        return tuple(cls.episode_metrics)

    @staticmethod
    def add_args(parser):
        """Add this model's flags to its argument group."""

    @classmethod
    def check_spaces(cls, observation_space, action_space):
        """Raise core.registry.ConfigError when the model cannot take these spaces."""

    #: the methods every model defines (BaseModel's raise NotImplementedError), with what each
    #: is for: checked when a run starts (``check_contract``)
    REQUIRED_METHODS = {
        "choose_actions": "actions for a batch of observations, on every worker",
        "step": "the loss of one batch and its gradients, on the learner",
        "configure_optimizer": "the optimizer of its parameters, on the learner",
        "learning_rate": "the learning rate at a fraction of --total_steps, on the learner",
    }

    @classmethod
    def check_contract(cls, name=None):
        """Raise ConfigError naming every required method the model class leaves to
        BaseModel (whose versions raise NotImplementedError), before anything starts."""
        missing = [m for m in cls.REQUIRED_METHODS
                   if getattr(cls, m, None) is getattr(BaseModel, m)]
        if missing:
            where = inspect.getsourcefile(cls) or cls.__module__
            listed = "; ".join(f"{m} ({cls.REQUIRED_METHODS[m]})" for m in missing)
            raise ConfigError(
                f"model plugin {name or cls.__name__} ({cls.__name__} in {where}) does not "
                f"define {len(missing)} method{'s' if len(missing) > 1 else ''} every model "
                f"needs: {listed}. models/base.py BaseModel says what each takes and returns; "
                f"models/ppo.py is a complete example (or subclass PPOModel and override "
                f"what differs).")

    @classmethod
    def update_precision_of(cls, config):
        """The precision this model's update asks for in ``config`` ("fp32", "bf16" or "auto":
        core/distributed/devices.py resolve_precision), for the run's start-up line; None: the
        model has no such setting (fp32)."""
        return None

    def __init__(self, args, observation_space, action_space):
        super().__init__()
        self.args = args
        self.observation_space = observation_space
        self.action_space = action_space

    def choose_actions(self, obs, deterministic: bool = False
                       ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """Actions [B, *action_shape] for a batch of observations, plus what the agent needs
        (log-probs, values). ``obs`` is an array [B, ...] for a Box observation space, else a
        dict {leaf path: array [B, ...]} (core/spaces.py; ``layout_of(space).decode(obs)``
        gives the nested form, and its ``action_mask`` leaf, if any, must be obeyed).

        A recurrent model takes two more keyword arguments, ``state`` (its state for these
        rows, as ``initial_state`` makes it: a dict {name: array [B, ...]}) and
        ``episode_starts`` (bool [B]: these rows begin an episode, their state must be reset
        first), and returns the state after this step in the extras under "state"."""
        raise NotImplementedError

    def assign_env_slots(self, slots, total_slots):
        """Optional: which of the run's env slots this model acts for, told by its rollout
        worker once it is built. ``slots``: the global indices of the worker's envs (worker
        i's env e is i * --num_envs_per_worker + e), in the order of ``choose_actions``'s
        rows; ``total_slots``: how many the run has. A model whose exploration differs per
        actor uses it (Ape-X's epsilon ladder: models/dqn.py); the test worker never calls it.

        Also optional, called by a rollout worker before each fragment's first step:
        ``begin_fragment(num_envs, progress)``, ``progress`` being the run's env steps over
        --total_steps when the loop gives it (the off-policy loop does), else None (gSDE draws
        its exploration matrices there, DQN sets its epsilon schedule)."""

    def observe_round(self, agent_stats):
        """Optional, on the learner's model: the statistics each rollout worker's agent
        returned for its fragment of the round just learned from (``send_trajectory``'s
        dicts). Returns {column: value} for metrics.csv (columns named in
        ``episode_metrics``); what the model merges of them into its buffers (RND's intrinsic
        return moments: models/ppo_rnd.py) reaches the workers with the next weights. The
        on-policy loop calls it once per round, after the round's updates."""
        return {}

    def observe_episodes(self, episodes):
        """Optional, on the learner's model: the episodes that finished in the round just
        learned from, as the env scored them (a list of {name: number}: the env's
        info["episode_metrics"] at each one's last step, core/sampling/envs.py). Returns
        {column: value} for metrics.csv (columns named in ``episode_metrics``). What the model
        keeps of them in its buffers (a self-play pool's win rates and ratings:
        models/selfplay_ppo.py) reaches the workers with the next weights and is checkpointed
        with them. The on-policy loop calls it once per round, after the round's updates."""
        return {}

    def initial_state(self, batch_size):
        """A recurrent model's state for ``batch_size`` fresh episodes: a dict {name: numpy
        array [batch_size, ...]}; None for a model without memory."""
        return None

    def state_tensors(self, state, episode_starts, rows):
        """A recurrent model's numpy state and starts as tensors on its ``device``; None:
        fresh episodes."""
        if state is None:
            state, episode_starts = self.initial_state(rows), np.ones(rows, dtype=bool)
        starts = torch.as_tensor(np.asarray(episode_starts, dtype=bool), device=self.device)
        return ({name: torch.as_tensor(np.asarray(value), device=self.device)
                 for name, value in state.items()}, starts)

    def export_module(self) -> nn.Module:
        """The acting path as a module of tensors only, for ``main.py --export`` (ONNX or a
        torch.export program; ddrl/export.py adds the normalizer and the env's action
        bounds around it). Its ``forward`` takes, positionally:

        - the observation: one tensor [B, *shape] for a Box space; for a Dict or Tuple space
          one tensor per leaf, in ``layout_of(space).leaves`` order, each in the leaf's dtype
          (the ``action_mask`` leaf included, as the env gives it: masked actions must never
          be chosen), values as ddrl carries them (Discrete starts already subtracted);
        - for a recurrent model, then the state tensors in ``initial_state``'s order and an
          ``episode_starts`` bool tensor [B];

        and returns the deterministic action [B, *action_shape] exactly as
        ``choose_actions(deterministic=True)`` does (same index space, same numbers), or for a
        recurrent model a tuple (action, *next state tensors in ``initial_state``'s order).
        It must reuse this model's own torch submodules (so the export computes what the
        model computes) and trace with ``torch.export.export`` at a dynamic batch size."""
        raise ConfigError(
            f"model {type(self).__name__} cannot be exported: it has no export_module(). "
            f"Implement export_module(self) in {type(self).__name__}, returning a torch.nn.Module "
            f"whose forward takes the observation tensors (one for a Box space, one per leaf of "
            f"core.spaces.layout_of(observation_space).leaves for a Dict or Tuple, its "
            f"action_mask included; a recurrent model's state tensors and episode_starts after "
            f"them) and returns the action choose_actions(deterministic=True) returns (and the "
            f"next state), built from the model's own submodules (models/base.py says how; "
            f"models/ppo.py, models/sac.py and models/dqn.py have examples).")

    def step(self, batch) -> Tuple[Gradients, Dict[str, float]]:
        """Loss on a batch; returns (gradients by parameter name, statistics)."""
        raise NotImplementedError

    # -- updates that never wait on the device (the replay loop's device rounds) ------------
    #: whether ``update_on_inputs`` may be captured as a CUDA graph (--cuda_graphs) or compiled
    #: (--compile_update): the same kernels on tensors of the same shapes every call, no host
    #: branch on values or counters inside, no state written but the gradients (batch-norm
    #: statistics are state). Read from the model's own class body only: a subclass that
    #: keeps the update safe says so again (core/learning/device_rounds.py graph_safe)
    update_graph_safe = False

    def update_inputs(self, batch) -> Tuple[torch.Tensor, ...]:
        """A replay batch as the tuple of tensors on this model's device that
        ``update_on_inputs`` takes. A model that learns from replay implements this,
        ``update_loss`` and (if it has host-side statistics) ``update_extras``, and mixes in
        ``ReplayModelSteps``, which gives ``update_on_inputs`` and ``step``; the parameter
        server may then run its updates without waiting on the device
        (core/learning/device_rounds.py)."""
        raise NotImplementedError

    def update_on_inputs(self, *inputs) -> Tuple[Dict[str, torch.Tensor], Optional[torch.Tensor]]:
        """The losses on ``update_inputs``' tensors, backward into the parameters' .grad;
        returns (statistics as 0-d tensors by name, |TD errors| [B] or None). Nothing in it may
        copy to the host (no .item(), .cpu(), .tolist(), bool of a tensor). ReplayModelSteps
        gives it from ``update_loss``."""
        raise NotImplementedError

    def update_extras(self, progress: float) -> Dict[str, float]:
        """Statistics known on the host without the batch (DQN's epsilon at ``progress``)."""
        return {}

    def can_update_on_device(self) -> bool:
        """Whether this model implements the three methods above."""
        return type(self).update_on_inputs is not BaseModel.update_on_inputs

    def configure_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def learning_rate(self, progress: float) -> float:
        """Learning rate at ``progress`` (fraction of --total_steps done), for the learner."""
        raise NotImplementedError

    def max_grad_norm(self):
        """Global gradient-norm clip the learner applies to the averaged gradient (None: off)."""
        return None

    # Weights travel as numpy arrays: Ray puts them in the object store without a copy.
    def get_weights(self) -> Weights:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def set_weights(self, weights: Weights):
        """Load ``weights`` (by state-dict name; other keys are ignored), and their version
        when they carry one."""
        if WEIGHTS_VERSION_KEY in weights:
            self.weights_version = int(np.asarray(weights[WEIGHTS_VERSION_KEY]))
        with torch.no_grad():
            for name, tensor in self.state_dict().items():
                # Arrays from Ray's object store are read-only: copy rather than alias them.
                tensor.copy_(torch.tensor(np.asarray(weights[name])))

    def collect_gradients(self, skip_none=False) -> Optional[Gradients]:
        """The gradients ``step`` left in the parameters, as numpy arrays by name (a parameter
        without one: zeros, or left out with ``skip_none``). None inside
        ``gradients_in_place()``: the learner in this process steps them where they are."""
        if getattr(self, "_gradients_in_place", False):
            return None
        return {name: (p.grad.detach().cpu().numpy().copy() if p.grad is not None
                       else np.zeros(tuple(p.shape), dtype=np.float32))
                for name, p in self.named_parameters() if p.grad is not None or not skip_none}

    @contextlib.contextmanager
    def gradients_in_place(self):
        """Inside the block ``collect_gradients`` returns None and the gradients stay in the
        parameters' ``.grad``: a learner that computes its own updates (SAC's parameter server
        with one learner) then applies them without two copies through numpy
        (core/learning/learner.py ``apply_in_place``)."""
        self._gradients_in_place = True
        try:
            yield
        finally:
            self._gradients_in_place = False
