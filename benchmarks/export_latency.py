"""What an exported policy costs to act with (main.py --export, ddrl/export.py): the
latency of one call at batch 1 and at batch 256 through Policy.act (ddrl's own acting path),
the torch.export program (.pt2, torch.export.load(...).module()) and onnxruntime, each on one
thread, for two policies: a CartPole MLP PPO (64x64) and an Atari-shaped Nature-CNN PPO (4x84x84
uint8 frames, the CNN of ALE runs). Plus the cold start: a fresh Python process that imports,
loads and acts once, per runtime.

    .venv/bin/python benchmarks/export_latency.py            # table + benchmarks/results/export-latency.json
    .venv/bin/python benchmarks/export_latency.py --atari_run runs/breakout   # a real ALE run

Each latency is the median and the 90th percentile of --calls timed calls after --warmup
untimed ones, numpy in and numpy out for all three (what a control loop hands over and gets
back). Policy.act includes what it adds around the network (the single/batch check, the
normalizer if any, the action post-processing); on the MLP it acts through numpy
(models/numpy_mlp.py), not torch. The policies come from short runs made here (a few thousand
CartPole steps; a few hundred steps on random uint8 frames of Atari's preprocessed shape, whose
network is exactly an ALE run's: latency depends on the shapes, not on the weights), unless
--cartpole_run / --atari_run name runs to use. The load is printed and recorded: measure on an
idle machine (1-minute load below 0.5).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

RUNTIMES = ("Policy.act", "pt2", "onnxruntime")
BATCHES = (1, 256)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
FRAMES_ID = "ddrl_bench/AtariShapedFrames-v0"

# cold start in a fresh interpreter: {path} is the run or file, {obs} a .npy of one observation
COLD_START = {
    "Policy.act": ("import ddrl\npolicy = ddrl.load({path!r})\n"
                   "policy.act(np.load({obs!r}))\n"),
    "pt2": ("import torch\ntorch.set_num_threads(1)\n"
            "program = torch.export.load({path!r}).module()\n"
            "with torch.no_grad():\n    program(torch.as_tensor(np.load({obs!r})[None]))\n"),
    "onnxruntime": ("import onnxruntime\noptions = onnxruntime.SessionOptions()\n"
                    "options.intra_op_num_threads = options.inter_op_num_threads = 1\n"
                    "session = onnxruntime.InferenceSession({path!r}, options, "
                    "providers=['CPUExecutionProvider'])\n"
                    "session.run(None, {{session.get_inputs()[0].name: np.load({obs!r})[None]}})\n"),
}
COLD_TEMPLATE = ("import time\nstart = time.perf_counter()\nimport numpy as np\n{body}"
                 "print(time.perf_counter() - start)\n")


def add_args(parser):
    parser.add_argument("--calls", type=int, default=2000,
                        help="timed calls per MLP measurement at batch 1 (default: %(default)s; "
                             "batch 256 and the CNN take fewer, in proportion to their cost)")
    parser.add_argument("--warmup", type=int, default=50,
                        help="untimed calls before each measurement (default: %(default)s)")
    parser.add_argument("--cold_starts", type=int, default=3,
                        help="fresh processes per cold-start figure; the median is reported "
                             "(0: no cold starts) (default: %(default)s)")
    parser.add_argument("--cartpole_run", default=None,
                        help="a CartPole PPO run directory to use (default: train one here)")
    parser.add_argument("--atari_run", default=None,
                        help="a PPO run on 4x84x84 uint8 frames (e.g. ALE/Breakout-v5 with "
                             "configs/ppo-atari.yaml) to use (default: train one here on random "
                             "frames of that shape)")
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results",
                                                      "export-latency.json"),
                        help="the JSON to write (default: %(default)s)")


# -- the machine -------------------------------------------------------------------------------
def cpu_info():
    """The CPU's model name and the vector/matrix flags that decide torch's and onnxruntime's
    kernels, from /proc/cpuinfo."""
    model, flags = platform.processor() or None, set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in (None, "", "x86_64"):
                    model = value.strip()
                if key.strip() == "flags" and not flags:
                    flags = set(value.split())
    return {"model_name": model, "cores": os.cpu_count(),
            "flags": {flag: flag in flags for flag in CPU_FLAGS}}


def load_average():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


# -- the policies ------------------------------------------------------------------------------
def register_frames_env():
    """Random uint8 frames of Atari's preprocessed shape (4x84x84), for the Nature CNN."""
    import gymnasium as gym
    from gymnasium import spaces

    class AtariShapedFrames(gym.Env):
        def __init__(self):
            self.observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
            self.action_space = spaces.Discrete(4)
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), 0.0, False, self.t >= 32, {}

    if FRAMES_ID not in gym.registry:
        gym.register(id=FRAMES_ID, entry_point=AtariShapedFrames)


def train_policies(workdir):
    """(CartPole run, Nature-CNN run): short runs, one process, seed 0."""
    import ddrl
    register_frames_env()
    quiet = dict(num_workers=0, seed=0, quiet=True, tensorboard=False, eval_episodes=1)
    cartpole = os.path.join(workdir, "cartpole")
    ddrl.train(gym_id="CartPole-v1", total_steps=4096, eval_interval=4096, run_dir=cartpole,
               **quiet)
    frames = os.path.join(workdir, "frames")
    ddrl.train(gym_id=FRAMES_ID, total_steps=256, eval_interval=256, num_envs_per_worker=4,
               rollout_steps=64, batch_size=64, num_epochs=1, run_dir=frames, **quiet)
    return cartpole, frames


def observations(policy, rows, seed=0):
    """A batch of ``rows`` observations of the policy's (Box) space."""
    space = policy.observation_space
    rng = np.random.default_rng(seed)
    if np.dtype(space.dtype) == np.uint8:
        return rng.integers(0, 256, (rows, *space.shape), dtype=np.uint8)
    return rng.normal(size=(rows, *space.shape)).astype(space.dtype)


# -- timing --------------------------------------------------------------------------------------
def actors(policy, files):
    """runtime -> a function of a numpy batch that returns numpy actions."""
    import onnxruntime
    import torch
    program = torch.export.load(files["pt2"]).module()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    session = onnxruntime.InferenceSession(files["onnx"], options,
                                           providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def pt2(batch):
        with torch.no_grad():
            return program(torch.from_numpy(batch)).numpy()

    return {"Policy.act": policy.act, "pt2": pt2,
            "onnxruntime": lambda batch: session.run(None, {name: batch})[0]}


def time_calls(act, batch, calls, warmup):
    """(median, p90) of ``calls`` calls in microseconds, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        act(batch)
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter_ns()
        act(batch)
        times[i] = time.perf_counter_ns() - start
    return float(np.median(times) / 1e3), float(np.percentile(times, 90) / 1e3)


def calls_for(kind, rows, base):
    """Fewer calls where one costs more: batch 256 and the CNN."""
    scale = {("mlp", 1): 1, ("mlp", 256): 4, ("cnn", 1): 10, ("cnn", 256): 200}[(kind, rows)]
    return max(5, base // scale)


def cold_start(runtime, path, obs_file, repeats):
    """Median seconds, in a fresh interpreter: imports + load + one action (inside), and the
    whole process (outside: the interpreter's own start and exit included)."""
    script = COLD_TEMPLATE.format(body=COLD_START[runtime].format(path=path, obs=obs_file))
    inside, outside = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                              text=True, timeout=600)
        outside.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"cold start of {runtime} failed: {proc.stderr[-2000:]}")
        inside.append(float(proc.stdout.strip().splitlines()[-1]))
    return float(np.median(inside)), float(np.median(outside))


def measure(kind, run_dir, workdir, args):
    """Every runtime's latency at both batch sizes and its cold start, for one policy."""
    import ddrl
    from ddrl.export import export_policy
    policy = ddrl.load(run_dir)
    files = {fmt: os.path.join(workdir, f"{kind}.{fmt}") for fmt in ("onnx", "pt2")}
    for fmt, path in files.items():
        export_policy(policy, fmt, path)
    act = actors(policy, files)
    rows = []
    for batch_rows in BATCHES:
        batch = observations(policy, batch_rows)
        reference = policy.act(batch)
        for runtime in RUNTIMES:
            # the same actions (tests/test_export.py asserts it): recorded, as a check
            agreement = float(np.mean(np.asarray(act[runtime](batch)) == reference))
            calls = calls_for(kind, batch_rows, args.calls)
            median, p90 = time_calls(act[runtime], batch, calls, args.warmup)
            rows.append({"policy": kind, "runtime": runtime, "batch": batch_rows,
                         "calls": calls, "median_us": median, "p90_us": p90,
                         "same_actions_as_policy_act": agreement})
    obs_file = os.path.join(workdir, f"{kind}-obs.npy")
    np.save(obs_file, observations(policy, 1)[0])
    cold = {}
    for runtime, path in (("Policy.act", run_dir), ("pt2", files["pt2"]),
                          ("onnxruntime", files["onnx"])):
        if args.cold_starts:
            inside, outside = cold_start(runtime, path, obs_file, args.cold_starts)
            cold[runtime] = {"import_load_first_action_s": inside, "process_s": outside}
    sizes = {fmt: os.path.getsize(path) for fmt, path in files.items()}
    return {"policy": kind, "run_dir": run_dir, "observation_shape":
            list(policy.observation_space.shape), "file_bytes": sizes, "latency": rows,
            "cold_start": cold}


def table(results):
    """The markdown tables: latency per runtime and batch, then the cold starts."""
    lines = ["| policy | batch | " + " | ".join(f"{r} median / p90 (us)" for r in RUNTIMES)
             + " |", "| --- | --- | " + " | ".join("---" for _ in RUNTIMES) + " |"]
    for result in results:
        for rows in BATCHES:
            cells = []
            for runtime in RUNTIMES:
                row = next(r for r in result["latency"]
                           if r["runtime"] == runtime and r["batch"] == rows)
                cells.append(f"{row['median_us']:,.0f} / {row['p90_us']:,.0f}")
            lines.append(f"| {result['policy']} | {rows} | " + " | ".join(cells) + " |")
    lines += ["", "| policy | " + " | ".join(f"{r} cold start (s)" for r in RUNTIMES) + " |",
              "| --- | " + " | ".join("---" for _ in RUNTIMES) + " |"]
    for result in results:
        cells = [f"{result['cold_start'][r]['import_load_first_action_s']:.2f} "
                 f"({result['cold_start'][r]['process_s']:.2f})" if r in result["cold_start"]
                 else "-" for r in RUNTIMES]
        lines.append(f"| {result['policy']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(parser)
    args = parser.parse_args(argv)
    import onnxruntime
    import torch
    torch.set_num_threads(1)
    load_before = load_average()
    cpu = cpu_info()
    print(f"cpu: {cpu['model_name']}, {cpu['cores']} cores, flags "
          f"{', '.join(f for f, on in cpu['flags'].items() if on) or 'none of ' + str(CPU_FLAGS)}"
          f"; 1-minute load {load_before:.2f}; one thread per runtime (torch.set_num_threads(1), "
          f"onnxruntime intra_op_num_threads=1)", flush=True)
    with tempfile.TemporaryDirectory(prefix="export-latency-") as workdir:
        cartpole, frames = args.cartpole_run, args.atari_run
        if cartpole is None or frames is None:
            trained = train_policies(workdir)
            cartpole, frames = cartpole or trained[0], frames or trained[1]
        results = [measure("mlp", cartpole, workdir, args),
                   measure("cnn", frames, workdir, args)]
    results[0]["policy"], results[1]["policy"] = "CartPole MLP 64x64", "Nature CNN 4x84x84"
    text = table(results)
    print(text)
    record = {
        "what": "act latency of an exported policy: Policy.act, torch.export (.pt2) and "
                "onnxruntime, one thread each; cold start in a fresh process",
        "command": " ".join([os.path.relpath(__file__, REPO), *(argv or sys.argv[1:])]),
        "cpu": cpu, "load_average_before": load_before, "load_average_after": load_average(),
        "threads": {"torch": torch.get_num_threads(), "onnxruntime_intra_op": 1},
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                     "python": platform.python_version()},
        "results": results, "table": text,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from core.atomic import atomic_write_text
    atomic_write_text(args.out, json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return record


if __name__ == "__main__":
    main()
