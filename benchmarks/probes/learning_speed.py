"""Learning speed on a torch device: samples per second through ddrl's real learning step
(its own models, agents and Learner, with the presets' settings), so that a GPU's gain is
measured on the code a run executes, not on a stand-in network.

    .venv/bin/python benchmarks/probe.py learning-speed --seconds 5 --threads 1
    .venv/bin/python benchmarks/probe.py learning-speed --devices cpu cuda --out /tmp/learning-speed.json

Workloads (random data of the envs' shapes: no ROM, no env is built):

- ``ppo-atari``: PPO with the Nature CNN as configs/ppo-atari.yaml builds it for Breakout
  (uint8 frames [4, 84, 84], the stack first as gym_env's FrameStackObservation gives it;
  Discrete(4)), a round of 8 envs x 128 steps whose actions, log-probs and values the policy
  itself gave, minibatches of 256 (the preset's batch_size), advantages per minibatch. Two modes:
  ``ddrl``: what a rollout worker and the driver's learner do per minibatch today (--num_gpus:
  the worker's model on DEVICE): ``DefaultAgent.fetch_grads`` loads the learner's numpy weights
  into the DEVICE model and computes the gradient there (models/ppo.py ``step``), the gradients
  come back as CPU numpy (``collect_gradients``), are averaged as the driver does and applied by
  ``Learner.apply`` to the learner's CPU model; ``device``: the same loss with the gradient left
  in ``.grad`` (``gradients_in_place``) and ``Learner.apply_in_place`` stepping the model's own
  optimizer on DEVICE: no weights or gradients cross to the host, the bound a GPU learner
  could reach. The gap between the two is the cost of ddrl's gradient-collecting path.
  ``--precisions`` gives its --ppo_precision too (fp32, bf16).
- ``dqn-atari``: DQN with the Nature CNN as configs/dqn-atari.yaml (batch 32), and
- ``sac-lunar``: SAC with configs/sac-LunarLanderContinuous-v3.yaml's networks (256,256, batch
  256, 8 observations, 2 actions) in ``--precisions`` (the model's own autocast): one update
  each as the parameter server does it with one learner (mode ``server``:
  core/learning/parameter_server.py ``update``, fetch_grads inside ``gradients_in_place`` and
  ``Learner.apply_in_place``), the model on DEVICE, the replay batch arriving as numpy arrays;
- ``dqn-lunar``: DQN's LunarLander-v3 preset (256x256, batch 128), the same way.

The three replay workloads take ``--server_modes``: ``server`` (one update per call, as above,
waiting on the device as it goes), ``rounds`` (the preset's --updates_per_call updates per call
as one device round: core/learning/device_rounds.py, one wait per call), ``graphs`` (rounds
whose forward and backward passes replay a CUDA graph; on the CPU the same as rounds, with a
note), and ``compiled`` / ``graphs_compiled``: rounds or graphs with the loss compiled by
torch.compile (--compile_update on; the compiling falls in the warm-up). A round's time is
divided among its updates.

Per configuration (devices x threads x workloads x modes or precisions): ``--warmup`` untimed
updates, then updates for ``--seconds``, each timed to its end (on CUDA after
``torch.cuda.synchronize``; every call already waits on the device for its statistics, so
this adds no wait). Reported: updates/s, samples/s (batch x updates/s: frames of learning per
second on Atari), the median update in ms, on CUDA the device's name and torch's peak memory.
``--threads`` is torch.set_num_threads for each configuration (CUDA ones included: the host's
share, the CPU learner of ``ddrl`` mode above all). In ``ddrl`` mode the CPU learner's weights
and the DEVICE model's are compared after the timed updates (``weights_max_abs_diff``: 0 when
the round trip is exact). CUDA asked of a torch without it: the configuration is skipped with
its reason. ``measure()`` is the function other scripts call (benchmarks/gpu_check.py).
"""
import json
import os
import platform
import statistics
import sys
import time

from probes import REPO, command, git_commit

WORKLOADS = ("ppo-atari", "dqn-atari", "sac-lunar", "dqn-lunar")
PRESETS = {"ppo-atari": "ppo-atari.yaml", "dqn-atari": "dqn-atari.yaml",
           "sac-lunar": "sac-LunarLanderContinuous-v3.yaml", "dqn-lunar": "dqn-LunarLander-v3.yaml"}
PPO_MODES = ("ddrl", "device")
#: the parameter server's modes: one update per call, waiting on the device as it goes
#: (server); the preset's --updates_per_call updates as one device round (rounds); the same
#: with the forward and backward passes replayed as a CUDA graph
#: (graphs), and either with the loss compiled by torch.compile (--compile_update on)
SERVER_MODES = ("server", "rounds", "graphs", "compiled", "graphs_compiled")
SERVER_FLAGS = {"server": ("--device_rounds", "off", "--cuda_graphs", "off"),
                "rounds": ("--device_rounds", "on", "--cuda_graphs", "off"),
                "graphs": ("--device_rounds", "on", "--cuda_graphs", "on"),
                "compiled": ("--device_rounds", "on", "--cuda_graphs", "off",
                             "--compile_update", "on"),
                "graphs_compiled": ("--device_rounds", "on", "--cuda_graphs", "on",
                                    "--compile_update", "on")}
FRAMES = (4, 84, 84)  # gym_env's Atari observation: 4 stacked 84x84 grayscale frames
LOSS_KEYS = {"ppo-atari": ("policy_loss", "value_loss", "entropy"), "dqn-atari": ("q_loss",),
             "sac-lunar": ("critic_loss", "actor_loss", "alpha_loss"), "dqn-lunar": ("q_loss",)}


def add_args(p):
    p.add_argument("--devices", "--device", nargs="+", default=["cpu"], type=device_name,
                   help="torch devices: cpu, cuda, cuda:N (default: %(default)s)")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="torch threads per configuration (default: 1 and os.cpu_count())")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--modes", nargs="+", choices=PPO_MODES, default=list(PPO_MODES),
                   help="ppo-atari's modes (default: %(default)s)")
    p.add_argument("--server_modes", nargs="+", choices=SERVER_MODES, default=["server"],
                   help="the other workloads' modes (default: %(default)s)")
    p.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"],
                   help="sac-lunar's --sac_precision, ppo-atari's --ppo_precision and "
                        "dqn-atari's --dqn_precision values (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=10.0,
                   help="timed seconds per configuration (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed updates first (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write every result here as JSON")


def device_name(text):
    import argparse
    if text == "cpu" or text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda or cuda:N")


def cuda_missing():
    """Why CUDA cannot be used here, or None."""
    import torch
    if torch.cuda.is_available():
        return None
    why = "a CPU-only build" if torch.version.cuda is None else "no CUDA device visible"
    return f"torch {torch.__version__} cannot use CUDA here ({why})"


# -- the workloads ------------------------------------------------------------------------------
class Workload:
    """One workload built on a device: ``update()`` runs one learning step and returns its
    statistics (None when it was skipped as NaN or inf); ``batch`` is its sample count."""
    batch = 0
    precision = "fp32"

    def update(self):
        raise NotImplementedError

    def report(self):
        """What the result records besides the timings (the round trip's check)."""
        return {}


def preset(workload, *flags):
    """The run's spec (options/options.py run_spec) with the workload's preset and ``flags``."""
    from options.options import parse_args, run_spec
    args = parse_args(["--config", os.path.join(REPO, "configs", PRESETS[workload]), *flags])
    return args, run_spec(args)


class PPOAtari(Workload):
    def __init__(self, device, mode, seed, precision="fp32"):
        import copy
        import numpy as np
        import torch
        from gymnasium import spaces
        from core.learning.learner import Learner
        from core.plugins import load_plugins
        args, spec = preset("ppo-atari", "--ppo_precision", precision)
        self.precision = precision
        plugins = load_plugins(spec)
        torch.manual_seed(seed)
        model = plugins.model_cls(spec.model, spaces.Box(0, 255, FRAMES, np.uint8),
                                  spaces.Discrete(4))
        self.batch, self.mode = args.batch_size, mode
        rows = args.num_envs_per_worker * args.rollout_steps
        self.num_minibatches = max(1, rows // self.batch)
        rng = np.random.default_rng(seed)
        obs = rng.integers(0, 256, (rows, *FRAMES), dtype=np.uint8)
        acted = [model.choose_actions(obs[i:i + 256]) for i in range(0, rows, 256)]
        advantages = rng.standard_normal(rows).astype(np.float32)
        values = np.concatenate([extras["values"] for _, extras in acted]).astype(np.float32)
        data = {"observations": obs, "actions": np.concatenate([a for a, _ in acted]),
                "old_log_probs": np.concatenate([e["log_probs"] for _, e in acted]),
                "advantages": advantages, "returns": values + advantages, "old_values": values}
        self.moments = (float(advantages.mean()), float(advantages.std()))
        if mode == "ddrl":  # the learner's model on the CPU, the worker's own copy on DEVICE
            self.learner = Learner(model)
            self.device_model = copy.deepcopy(model).to(device)
            self.weights = self.learner.weights_for_workers()
        else:
            self.device_model = model.to(device)
            self.learner = Learner(self.device_model)
        self.agent = plugins.agent_cls(spec.agent, self.device_model, seed=seed)
        self.agent.adopt_data([data])  # the round's data on DEVICE, as a worker keeps it
        self.calls = 0

    def update(self):
        from core.faults import all_finite
        from core.learning.learner import average_gradients
        from core.types import GradientRequest
        request = GradientRequest(0, self.calls % self.num_minibatches, self.num_minibatches,
                                  *self.moments, 0.0, self.learner.version)
        self.calls += 1
        if self.mode == "device":
            with self.device_model.gradients_in_place():
                result = self.agent.fetch_grads(None, request)
            finite = all_finite(result.stats, LOSS_KEYS["ppo-atari"])
            return result.stats if finite and self.learner.apply_in_place(0.0) is not None else None
        result = self.agent.fetch_grads(self.weights, request)
        gradients = average_gradients([result.gradients], [result.num_samples])
        if not all_finite(result.stats, LOSS_KEYS["ppo-atari"]):
            return None
        norm = self.learner.apply(gradients, 0.0)
        self.weights = self.learner.weights_for_workers()
        return None if norm is None else result.stats

    def report(self):
        if self.mode != "ddrl":
            return {}
        import numpy as np
        self.agent.sync_weights(self.weights, self.learner.version)  # as the next minibatch would
        held = self.device_model.get_weights()
        diff = max(float(np.max(np.abs(held[k] - v)))
                   for k, v in self.learner.model.get_weights().items())
        return {"weights_max_abs_diff": diff, "weights_version": self.learner.version}


class ServerUpdate(Workload):
    """The parameter server's single-learner update on a model of ``workload``'s preset, in
    ``mode`` (SERVER_MODES): one update per call, or the preset's --updates_per_call updates
    per call as one device round, with or without a CUDA graph."""

    def __init__(self, workload, device, seed, flags=(), mode="server"):
        import numpy as np
        args, spec = preset(workload, *flags, *SERVER_FLAGS[mode])
        self.server = local_server(spec, *self.spaces(), device, seed)
        self.workload, self.batch = workload, args.batch_size
        self.mode = mode
        self.updates_per_call = 1 if mode == "server" else args.updates_per_call
        rng = np.random.default_rng(seed)
        self.batches = [self.random_batch(rng, args) for _ in range(4)]
        self.calls = 0

    def update(self):
        """One call of the server: its last update's stats (None when skipped)."""
        n = self.updates_per_call
        batches = [self.batches[(self.calls + i) % len(self.batches)] for i in range(n)]
        self.calls += n
        stats = self.server.update(batches, None, 0.0)[-1]
        return None if stats.get("skipped") else stats

    def report(self):
        info = self.server.device_info()
        return {k: info[k] for k in ("device_rounds", "pinned_batches", "cuda_graphs",
                                     "cuda_graphs_error", "compiled_update") if k in info}

    @staticmethod
    def replay_batch(transitions, n):
        import numpy as np
        from core.learning.replay_buffer import ReplayBatch
        return ReplayBatch(transitions, np.arange(n), np.zeros(n, np.int64),
                           np.ones(n, np.float32))


def local_server(spec, observation_space, action_space, device, seed):
    """A ParameterServer in this process for ``spec``'s model, agent and loop settings (its
    state without its process set-up): ``update(batches, None, progress)`` is a run's update."""
    import torch
    from core.learning.learner import Learner
    from core.learning.parameter_server import ParameterServer
    from core.plugins import load_plugins
    plugins = load_plugins(spec)
    torch.manual_seed(seed)
    model = plugins.model_cls(spec.model, observation_space, action_space).to(device)

    class Server(ParameterServer):
        def __init__(self):
            self.model, self.learner, self.group = model, Learner(model), None
            self.device = device
            self.agent = plugins.agent_cls(spec.agent, model, seed=seed)
            self.configure_rounds(spec.loop)

    return Server()


class DQNAtari(ServerUpdate):
    def __init__(self, device, seed, mode="server", precision="fp32"):
        super().__init__("dqn-atari", device, seed, ("--dqn_precision", precision), mode)
        self.precision = precision

    @staticmethod
    def spaces():
        import numpy as np
        from gymnasium import spaces
        return spaces.Box(0, 255, FRAMES, np.uint8), spaces.Discrete(4)

    def random_batch(self, rng, args):
        import numpy as np
        from core.learning.replay_buffer import Transitions
        n = args.batch_size
        frames = rng.integers(0, 256, (n, *FRAMES), dtype=np.uint8)
        return self.replay_batch(Transitions(
            frames, rng.integers(0, 4, n), np.sign(rng.standard_normal(n)).astype(np.float32),
            np.roll(frames, 1, axis=0), (rng.random(n) < 0.01).astype(np.float32),
            np.full(n, args.gamma, np.float32)), n)


class DQNLunar(ServerUpdate):
    """DQN's LunarLander-v3 preset (256x256, batch 128): 8 observations, 4 actions."""

    def __init__(self, device, seed, mode="server"):
        super().__init__("dqn-lunar", device, seed, mode=mode)

    @staticmethod
    def spaces():
        import numpy as np
        from gymnasium import spaces
        return spaces.Box(-np.inf, np.inf, (8,), np.float32), spaces.Discrete(4)

    def random_batch(self, rng, args):
        import numpy as np
        from core.learning.replay_buffer import Transitions
        n = args.batch_size
        obs = rng.standard_normal((n, 8)).astype(np.float32)
        return self.replay_batch(Transitions(
            obs, rng.integers(0, 4, n), rng.standard_normal(n).astype(np.float32),
            np.roll(obs, 1, axis=0), (rng.random(n) < 0.01).astype(np.float32),
            np.full(n, args.gamma, np.float32)), n)


class SACLunar(ServerUpdate):
    def __init__(self, device, seed, precision, mode="server"):
        super().__init__("sac-lunar", device, seed, ("--sac_precision", precision), mode)
        self.precision = precision

    @staticmethod
    def spaces():
        import numpy as np
        from gymnasium import spaces
        return (spaces.Box(-np.inf, np.inf, (8,), np.float32),
                spaces.Box(-1.0, 1.0, (2,), np.float32))

    def random_batch(self, rng, args):
        import numpy as np
        from core.learning.replay_buffer import Transitions
        n = args.batch_size
        obs = rng.standard_normal((n, 8)).astype(np.float32)
        return self.replay_batch(Transitions(
            obs, rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32), np.roll(obs, 1, axis=0),
            (rng.random(n) < 0.01).astype(np.float32)), n)

    def report(self):
        return {**super().report(), "precision_used": self.server.model.update_precision(
            self.server.model.device.type)}


def build(workload, device, mode=None, precision=None, seed=0):
    """The Workload for these settings (``mode``: ppo-atari's ddrl or device, the others'
    server; ``precision``: sac-lunar's fp32 or bf16, the others' fp32)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload {workload!r}: one of {', '.join(WORKLOADS)}")
    if workload == "ppo-atari":
        if mode not in (None, *PPO_MODES) or precision not in (None, "fp32", "bf16"):
            raise ValueError(f"ppo-atari runs in mode ddrl or device, in fp32 or bf16 (asked: "
                             f"mode {mode}, precision {precision})")
        return PPOAtari(device, mode or "ddrl", seed, precision or "fp32")
    if mode not in (None, *SERVER_MODES):
        raise ValueError(f"{workload} runs the parameter server's update in a mode of "
                         f"{', '.join(SERVER_MODES)} (asked: {mode})")
    mode = mode or "server"
    if workload == "dqn-atari":
        if precision not in (None, "fp32", "bf16"):
            raise ValueError(f"dqn-atari's precision: fp32 or bf16 (asked: {precision})")
        return DQNAtari(device, seed, mode, precision or "fp32")
    if workload == "dqn-lunar":
        if precision not in (None, "fp32"):
            raise ValueError(f"{workload} runs in fp32 (asked: {precision})")
        return DQNLunar(device, seed, mode)
    if precision not in (None, "fp32", "bf16"):
        raise ValueError(f"sac-lunar's precision: fp32 or bf16 (asked: {precision})")
    return SACLunar(device, seed, precision or "fp32", mode)


def compare_modes(workload="dqn-lunar", device="cpu", updates=12, seed=0,
                  modes=("rounds", "graphs")):
    """``updates`` updates on the same batches in two server modes (a multiple of the preset's
    updates per call), from the same initial weights:
    the largest absolute difference of the weights after them, and the weights' largest
    magnitude. DQN's update draws no noise, so its rounds with and without a CUDA graph must
    agree to float rounding (SAC's graph capture draws noise while it warms up: it cannot)."""
    import torch
    finals = []
    for mode in modes:
        work = build(workload, device, mode, None, seed)
        for _ in range(updates // work.updates_per_call):
            work.update()
        finals.append({k: v.detach().float().cpu() for k, v in
                       work.server.model.state_dict().items()})
        info = work.report()
    diff = max(float((finals[0][k] - finals[1][k]).abs().max()) for k in finals[0])
    scale = max(float(v.abs().max()) for v in finals[0].values())
    return {"workload": workload, "device": device, "modes": list(modes),
            "updates": updates, "weights_max_abs_diff": diff,
            "weights_max_abs": scale, "cuda_graphs_used": info.get("cuda_graphs"),
            **({"cuda_graphs_error": info["cuda_graphs_error"]}
               if info.get("cuda_graphs_error") else {}),
            "torch": torch.__version__}


# -- measuring ---------------------------------------------------------------------------------
def measure(workload, device="cpu", seconds=10.0, threads=1, mode=None, precision=None,
            warmup=5, seed=0):
    """Time ``workload``'s learning step on ``device`` with ``threads`` torch threads: the
    result as a dict (the module's docstring lists its figures; a ``skipped`` reason instead
    when the device is CUDA and torch cannot use it). torch's thread count is restored."""
    import torch
    result = {"workload": workload,
              "mode": mode or ("ddrl" if workload == "ppo-atari" else "server"),
              "device": device, "threads": int(threads),
              "precision": precision or "fp32"}
    cuda = device.startswith("cuda")
    if cuda:
        missing = cuda_missing()
        if missing:
            print(f"learning-speed: {workload} {result['mode']} on {device} skipped: {missing}",
                  file=sys.stderr, flush=True)
            return {**result, "skipped": missing}
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        work = build(workload, device, mode, precision, seed)

        def sync():
            if cuda:
                torch.cuda.synchronize(device)

        skipped, stats = 0, None
        for _ in range(warmup):
            work.update()
        sync()
        times = []
        start = time.perf_counter()
        while True:
            began = time.perf_counter()
            found = work.update()
            sync()
            ended = time.perf_counter()
            times.append(ended - began)
            skipped += found is None
            stats = found if found is not None else stats
            if ended - start >= seconds:
                break
        elapsed = ended - start
        per_call = getattr(work, "updates_per_call", 1)  # a round: several updates per call
        updates_per_s = len(times) * per_call / elapsed
        result.update(
            batch=work.batch, updates=len(times) * per_call, seconds=round(elapsed, 3),
            updates_per_s=round(updates_per_s, 3),
            samples_per_s=round(work.batch * updates_per_s, 1),
            median_update_ms=round(statistics.median(times) / per_call * 1e3, 3),
            updates_per_call=per_call,
            skipped_updates=skipped,
            losses={k: float(stats[k]) for k in LOSS_KEYS[workload]} if stats else None,
            **work.report())
        if cuda:
            index = torch.device(device).index
            index = torch.cuda.current_device() if index is None else index
            result.update(device_name=torch.cuda.get_device_name(index),
                          max_memory_allocated_mb=round(
                              torch.cuda.max_memory_allocated(index) / 2 ** 20, 1),
                          cudnn_benchmark=bool(torch.backends.cudnn.benchmark))
        return result
    finally:
        torch.set_num_threads(before)


def markdown(results):
    lines = ["| workload | mode | device | threads | precision | batch | updates | s | "
             "updates/s | samples/s | median ms | peak CUDA MB |",
             "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        head = (f"| {r['workload']} | {r['mode']} | {r.get('device_name') or r['device']} | "
                f"{r['threads']} | {r['precision']} | ")
        if "skipped" in r:
            lines.append(head + f"— | skipped: {r['skipped']} | | | | | |")
            continue
        memory = r.get("max_memory_allocated_mb")
        lines.append(head + f"{r['batch']} | {r['updates']} | {r['seconds']:.1f} | "
                     f"{r['updates_per_s']:.2f} | {r['samples_per_s']:,.0f} | "
                     f"{r['median_update_ms']:.1f} | {'—' if memory is None else memory} |")
    return "\n".join(lines)


def run(args, argv):
    import torch
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    missing = cuda_missing()
    if missing and any(d.startswith("cuda") for d in args.devices):
        print(f"learning-speed: the CUDA configurations are skipped: {missing}",
              file=sys.stderr, flush=True)
    results = []
    for device in args.devices:
        for n in threads:
            for workload in args.workloads:
                modes = args.modes if workload == "ppo-atari" else args.server_modes
                precisions = (args.precisions
                              if workload in ("sac-lunar", "ppo-atari", "dqn-atari") else [None])
                for mode in modes:
                    for precision in precisions:
                        if device.startswith("cuda") and missing:
                            result = {"workload": workload, "mode": mode or (
                                "ddrl" if workload == "ppo-atari" else "server"),
                                "device": device, "threads": n,
                                "precision": precision or "fp32", "skipped": missing}
                        else:
                            result = measure(workload, device, args.seconds, n, mode,
                                             precision, args.warmup, args.seed)
                        results.append(result)
                        if "skipped" not in result:
                            print(f"{workload} {result['mode']} {device} x{n} "
                                  f"{result['precision']}: {result['samples_per_s']:,.0f} "
                                  f"samples/s, {result['median_update_ms']:.1f} ms/update",
                                  file=sys.stderr, flush=True)
    table = markdown(results)
    print(table)
    if args.out:
        report = {"command": command(argv), "commit": git_commit(), "torch": torch.__version__,
                  "python": platform.python_version(), "cpu_count": os.cpu_count(),
                  "results": results, "markdown": table}
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
