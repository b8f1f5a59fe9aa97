"""What a GPU is used for, in one place: how many GPUs each kind of actor reserves from Ray
(``plan_gpus``) and which torch device a process computes on (``resolve_device``).

The plan depends on one thing a training loop declares (core/algos/trainer.py
``Trainer.updates_computed_by``), never on its name: whether its gradients are computed by
learner actors fed from replay (``LEARNERS``: the parameter server and learner workers) or by
the rollout workers on their own fragments (``ROLLOUT_WORKERS``). The driver makes the plan once
(``Trainer.gpu_plan``) and it travels with the run's spec (core/plugins.py) to every actor.
The decision, and why:

- **Learners (SAC, CrossQ: replay)**: the update is the bottleneck (a 256x256 update costs milliseconds; acting
  one step costs microseconds), so the GPU goes where the gradients are computed. With one
  learner (``--num_learners 1``) the parameter server computes the updates itself: it reserves
  the GPU. With ``--num_learners N > 1`` the learner workers compute the gradients and share the
  GPUs; the parameter server only averages and applies them (an Adam step on ~0.2M parameters)
  and stays on the CPU. Rollout workers, the replay buffer and the test worker reserve none:
  they act one batch of observations at a time or move numpy arrays, which a GPU would only
  slow down by the copies to and from it.
- **Rollout workers (PPO: gradient collecting)**: the rollout workers compute the gradients on their own
  fragments, so they share the GPUs for that; acting stays on the CPU (a batched forward pass
  of a few envs per step is cheaper there than a copy to the device and back). The driver's
  learner only averages gradients and takes an optimizer step (~0.1 ms): it stays on the CPU.
  A plugin's own loop (core/algos/trainers.py) declares which of the two it is (by default the
  rollout workers compute).
- **The driver's learner (PPO with --grad_workers 0: ``DRIVER_LEARNER``)**: the learner's own
  agent computes every minibatch gradient in the driver on the data all workers send, so the
  driver's learner takes the GPU (one device), its model, optimizer and the round's data
  there, and the gradients stay in place (no copy to the host and back). The rollout workers
  reserve none. Measured on an H100 with the Atari Nature CNN: 4.8x the frames of learning of
  16 CPU cores this way, 1.6x when each minibatch's gradients travel to a CPU learner
  (BENCHMARKS.md, "GPU").

Sharing: one process computes on one device (nothing here splits a model over GPUs), so an
actor reserves at most one GPU. When actors outnumber GPUs, each reserves ``1 / k`` with ``k``
the actors per device rounded up, so that every share fits on one device: Ray never splits a
fractional request over two GPUs, and ``num_gpus / N`` (e.g. 2/3 for 3 learners on 2 GPUs)
would leave the third actor unscheduled. With ``k`` dividing evenly this is ``num_gpus / N``.

A process computes on "cuda" only when it was given GPUs (in a Ray actor: ``ray.get_gpu_ids()``
is not empty; in the driver, with ``--num_workers 0`` or PPO's in-process worker: its planned
share is > 0, i.e. ``--num_gpus`` > 0) and torch can use CUDA. A process given GPUs that torch
cannot see (a CPU-only torch build, a node whose GPUs Ray counts but the driver does not) says
so in one line on stderr and computes on the CPU: the run still works.
"""
import math
import platform
import sys
from dataclasses import dataclass

import torch

from core import lazy_ray
from core.lazy_ray import ray
from core.errors import ConfigError

LEARNERS = "learners"
ROLLOUT_WORKERS = "rollout_workers"
DRIVER_LEARNER = "driver_learner"


@dataclass(frozen=True)
class GpuPlan:
    """GPUs each kind of actor reserves from Ray (``num_gpus`` of its actor options)."""
    computes: str = ROLLOUT_WORKERS   # who computes the gradients (the module's doc)
    num_gpus: int = 0
    num_workers: int = 0
    num_learners: int = 1
    parameter_server_gpus: float = 0.0
    learner_worker_gpus: float = 0.0
    rollout_worker_gpus: float = 0.0
    replay_buffer_gpus: float = 0.0
    test_worker_gpus: float = 0.0
    driver_learner_gpus: float = 0.0

    @property
    def reserved(self) -> float:
        """GPUs the run's actors reserve together (never more than ``num_gpus``)."""
        learners = self.num_learners if self.num_learners > 1 else 0
        return (self.parameter_server_gpus + learners * self.learner_worker_gpus
                + max(1, self.num_workers) * self.rollout_worker_gpus)


def gpu_share(num_gpus, sharers):
    """GPUs each of ``sharers`` actors reserves so that all fit on ``num_gpus`` whole devices:
    1 when there are enough, else 1/k with k actors per device (rounded down to Ray's
    precision of 1e-4, so that k shares never add up to more than one device)."""
    if num_gpus <= 0 or sharers <= 0:
        return 0.0
    per_device = math.ceil(sharers / num_gpus)
    return math.floor(1e4 / per_device) / 1e4


def plan_gpus(computes, num_gpus, num_workers, num_learners=1) -> GpuPlan:
    """The plan for a loop whose gradients ``computes`` (LEARNERS or ROLLOUT_WORKERS) computes,
    from the flags' values (see the module doc)."""
    if computes not in (LEARNERS, ROLLOUT_WORKERS, DRIVER_LEARNER):
        raise ValueError(f"computes must be {LEARNERS!r}, {ROLLOUT_WORKERS!r} or "
                         f"{DRIVER_LEARNER!r}, not {computes!r}")
    base = dict(computes=computes, num_gpus=int(num_gpus), num_workers=int(num_workers),
                num_learners=int(num_learners))
    if computes == DRIVER_LEARNER:
        return GpuPlan(**base, driver_learner_gpus=gpu_share(num_gpus, 1))
    if computes == ROLLOUT_WORKERS:
        # --num_workers 0: the one in-process worker computes the gradients.
        return GpuPlan(**base, rollout_worker_gpus=gpu_share(num_gpus, max(1, num_workers)))
    if num_learners > 1:
        return GpuPlan(**base, learner_worker_gpus=gpu_share(num_gpus, num_learners))
    return GpuPlan(**base, parameter_server_gpus=gpu_share(num_gpus, 1))


def plan_of(spec) -> GpuPlan:
    """The plan a run's spec carries (core/plugins.py PluginSpec.gpus); none: no GPUs."""
    return spec.gpus if spec.gpus is not None else GpuPlan()


# -- inside a process -------------------------------------------------------------------------
_warning = None  # the one line this process printed, if any (reported by actors' device_info)


def in_ray_actor() -> bool:
    return lazy_ray.initialized() and ray.get_runtime_context().get_actor_id() is not None


def given_gpus(planned_gpus):
    """(whether this process was given GPUs, what it was given, in words): Ray's GPU ids in an
    actor; in the driver, where no Ray reservation applies, its planned share."""
    if in_ray_actor():
        ids = list(ray.get_gpu_ids())
        return bool(ids), f"GPU(s) {ids} by Ray"
    return planned_gpus > 0, f"a {planned_gpus:g} GPU share by --num_gpus"


def resolve_device(planned_gpus, role="this process") -> str:
    """"cuda" when this process was given GPUs and torch can use CUDA, else "cpu" (with one
    line on stderr, once per process, when GPUs were given but torch sees none)."""
    global _warning
    given, what = given_gpus(planned_gpus)
    if not given:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if _warning is None:
        build = "a CPU-only build" if torch.version.cuda is None else "no CUDA device visible"
        _warning = (f"ddrl: {role} was given {what}, but torch {torch.__version__} cannot use "
                    f"CUDA here ({build}): it computes on the CPU")
        print(_warning, file=sys.stderr, flush=True)
    return "cpu"


def device_info(device):
    """What an actor reports about where it computes (summary.json's ``devices``, tests,
    diagnostics): the device, Ray's GPU ids, the one-line warning if any, and on CUDA the
    device's name and the most memory torch allocated on it in this process (proof that the
    work really ran there, not only that a device was chosen)."""
    info = {"device": str(device),
            "gpu_ids": list(ray.get_gpu_ids()) if in_ray_actor() else [],
            "warning": _warning}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
        info.update(cuda_device=torch.cuda.get_device_name(index),
                    max_memory_allocated_mb=round(torch.cuda.max_memory_allocated(index)
                                                  / 2 ** 20, 3))
    return info


def to_cpu(value):
    """``value`` (tensors in dicts, lists, tuples) with every tensor on the CPU: optimizer state
    leaves a GPU process for checkpoints, which must load on machines without one. Tensors
    already there are returned as they are (no copy)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def learning_model(model, device):
    """The model a process learns with: ``model`` itself on the CPU (no copy, bit-identical),
    else a copy on ``device``, so the original keeps acting on the CPU (PPO's rollout worker)."""
    if str(device) == "cpu":
        return model
    import copy
    return copy.deepcopy(model).to(device)


# -- checks ------------------------------------------------------------------------------------
def check_local_gpus(num_gpus, visible, cuda_visible_devices=None):
    """A local run cannot use GPUs torch does not see: one paragraph naming both."""
    if num_gpus <= visible:
        return
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} is a CPU-only build"
    elif cuda_visible_devices is not None:
        why = f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} (set by --gpu or the environment)"
    else:
        why = "no CUDA device was found"
    allowed = f"0 to {visible}" if visible else "0"
    raise ConfigError(
        f"--num_gpus {num_gpus} asks for {num_gpus} GPU(s), but torch sees {visible} CUDA "
        f"device(s) on this machine ({why}). Allowed here: --num_gpus {allowed}; with 0 "
        f"everything runs on the CPU. To use a Ray cluster's GPUs, join it with --address "
        f"(its GPUs are counted there).")


def check_cluster_gpus(num_gpus, cluster_gpus, address):
    """A run that reserves more GPUs than the joined cluster has would wait forever for its
    GPU actors: one paragraph instead."""
    if num_gpus <= cluster_gpus:
        return
    have = int(cluster_gpus)
    raise ConfigError(
        f"--num_gpus {num_gpus}, but the Ray cluster at --address {address} has {cluster_gpus:g} "
        f"GPU(s) in all. Allowed: --num_gpus {'0 to ' + str(have) if have else '0'}; a node "
        f"offers its GPUs when started with them (`python -m ddrl.cluster start ... "
        f"--num-gpus N`).")


def native_bf16(device_type="cpu") -> bool:
    """True where bfloat16 matrix products run in hardware: a CUDA device that supports them;
    an x86 CPU with AVX-512 BF16 or AMX; an Arm CPU whose /proc/cpuinfo lists ``bf16``.
    Elsewhere (e.g. AVX2-only CPUs) autocast emulates bf16, and an update is many times slower
    than in fp32: measured on an AVX2 AMD EPYC, a 256-wide linear layer's forward and backward
    on a batch of 512 took 63 ms in bf16 against 4.6 ms in fp32 (1024 wide: 1.35 s against
    41 ms; BENCHMARKS.md, "Cost of one SAC update")."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if platform.machine().lower() in ("aarch64", "arm64"):
        try:
            with open("/proc/cpuinfo") as f:
                return any(line.lower().startswith("features") and " bf16" in line
                           for line in f)
        except OSError:  # macOS: no /proc; stay with fp32 rather than guess
            return False
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


_emulated_bf16_warned = False


def time_precisions(update, device, repeats=10, margin=0.05):
    """--sac_precision auto where bf16 is native, decided by measuring, not assumed: ``update()``
    (one whole update, on a copy of the model the caller owns) is timed in fp32 and under bf16
    autocast, interleaved, twice each after two warm-up calls, and the faster kept: fp32 unless
    bf16 is at least ``margin`` faster (fp32 is the more accurate). Hardware with bf16 units is
    not always faster in bf16: on the Intel Xeon with AMX the SAC Pendulum preset ran 90 env
    steps/s with bf16 against 115 in fp32 (its 64-wide layers pay the casts and gain little),
    and on a GPU small layers wait on kernel launches, which autocast's casts add to. The random
    generators are restored afterwards, so a measured run draws what an unmeasured one would.
    Returns (choice, {"fp32": ms per update, "bf16": ms per update})."""
    import time
    device = torch.device(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = {"fp32": [], "bf16": []}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for precision in ("fp32", "bf16", "fp32", "bf16"):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                for _ in range(2):
                    update()
                sync()
                start = time.perf_counter()
                for _ in range(repeats):
                    update()
                sync()
            times[precision].append((time.perf_counter() - start) / repeats * 1e3)
    best = {precision: min(values) for precision, values in times.items()}
    choice = "bf16" if best["bf16"] < (1.0 - margin) * best["fp32"] else "fp32"
    return choice, best


def resolve_precision(requested, device_type="cpu") -> str:
    """--sac_precision, before any update: 'auto' is fp32 where bf16 is emulated
    (``native_bf16``: measuring would only cost seconds of a slow path), and bf16 where it is
    native, which the model then confirms or overturns by measuring its first update
    (``time_precisions``). An explicit 'bf16' is kept, with one line on stderr per process
    where it is emulated."""
    global _emulated_bf16_warned
    if requested == "auto":
        return "bf16" if native_bf16(device_type) else "fp32"
    if requested == "bf16" and not native_bf16(device_type) and not _emulated_bf16_warned:
        _emulated_bf16_warned = True
        where = ("this GPU" if device_type == "cuda"
                 else f"this CPU ({torch.backends.cpu.get_cpu_capability()}, no AVX-512 BF16 "
                      f"or AMX)")
        print(f"ddrl: --sac_precision bf16 on {where}: bfloat16 is emulated here, and an "
              f"update is many times slower than in fp32 (14x-33x measured on an AVX2 CPU); "
              f"--sac_precision auto picks fp32 on such hardware",
              file=sys.stderr, flush=True)
    return requested
