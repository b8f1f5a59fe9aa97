"""The GPU check (issue 50): one command that runs ddrl's GPU paths on a machine with one CUDA
GPU and many cores, and writes what it measured as JSON and a Markdown table.

    python benchmarks/gpu_check.py --out OUT            # on the GPU machine: ~9 minutes
    python benchmarks/gpu_check.py --dry_run --out OUT  # anywhere: the same code paths on the
                                                        # CPU, tiny budgets (~1 minute; a test)

Phases, in this order (``--phases`` picks some, in the order it names them), each writing its part of OUT/gpu_check.json
as soon as it ends, so a run cut short keeps what it measured:

- ``probe``: the machine (CPU, its flags, cores; the GPU, its memory; torch, CUDA, Ray and
  gymnasium versions).
- ``learning``: training runs side by side, each a ``main.py`` process stopped by --max_time:
  the seed's command line adapted to one GPU (``--gpu 0 --num_gpus 1``, 3 workers x 3 envs,
  batch 10, 16 CPUs), once as typed (learning starts in the driver while the Ray workers
  start) and once with ``--no-elastic_start`` (every gradient from the Ray workers), both to
  CartPole's 475; DQN on LunarLander-v3 and SAC on LunarLanderContinuous-v3 (their presets) to
  200, each with the learner on the GPU (``--num_gpus 1``; device rounds), with the GPU and
  ``--cuda_graphs`` (the ``_graphs`` runs) and the same run on the CPU; a user's batched
  simulator on the GPU (``ppo_pointmass_gpu``: examples/batched_sim/point_mass.py's 1,024
  point masses stepped in torch on cuda) to its -12, with PPO in one process and with APPO's
  two Ray workers stepping it (``appo_pointmass_gpu``). Every
  run's summary.json says where each part computed (``devices``: the device, CUDA's name and
  torch's peak memory there), which is the proof that the gradients ran on CUDA.
- ``updates``: learning throughput of ddrl's own update code (benchmarks/probes/learning_speed.py):
  the Atari Nature-CNN PPO and DQN updates on random uint8 frames of Atari's shape (no ROM
  travels to the GPU machine), SAC's LunarLander update in fp32 and bf16 and DQN's, on the GPU
  against all the CPU cores (and one); the replay updates one by one (server), as device rounds
  (rounds) and with CUDA graphs (graphs: core/learning/device_rounds.py); and DQN's weights after
  40 updates in rounds with and without the graph, which must agree (``graphs_match``).
- ``scaling``: benchmarks/scaling.py, PPO and Ape-X DQN with the 5 ms env at 8 and 16 workers
  (a share of N x 200 steps/s).
- ``export``: the policies the GPU learners trained load, act, evaluate and export to ONNX in a
  process that sees no GPU (CUDA_VISIBLE_DEVICES=""), the ONNX program acting as the policy does.

``--dry_run`` keeps every phase and its code path with the CPU as the device: no --gpu or
--num_gpus, tiny budgets, fewer workers (tests/test_gpu_check.py runs it in CI). OUT gets four
files: gpu_check.json, gpu_check.md, the console log (log.txt) and runs.tar.gz (every run's
metrics.csv, summary.json, config and logs; no checkpoints); the runs themselves go to --work
(on the GPU machine outside OUT, which sends back at most eight files).

On a GPU machine without Ray or gymnasium and without a package index, they travel as wheels
(`bash benchmarks/gpu_carry.sh` writes them to .whl/); there, from the repository's root:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out $OUT --work /tmp/gpu_check_runs
"""
import argparse
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for path in (HERE, REPO):
    if path not in sys.path:
        sys.path.insert(0, path)

from compare import end_process_group  # noqa: E402  (benchmarks/compare.py)

PHASES = ("probe", "learning", "updates", "scaling", "export")

#: The seed's command line (README), adapted to one GPU and this machine's 16 cores.
SEED_LINE = ("--env_name gym_env --agent_name default_agent --model_name ppo "
             "--num_envs_per_worker 3 --num_workers 3 --gpu 0 --num_gpus 1 --num_cpus 16 "
             "--batch_size 10")

#: name -> (flags, uses the GPU). Presets apply (configs/<model>-<gym_id>.yaml).
LEARNING_RUNS = {
    "ppo_seed_line": (SEED_LINE, True),
    "ppo_seed_line_ray": (SEED_LINE + " --no-elastic_start", True),
    "dqn_lunar_gpu": ("--model_name dqn --gym_id LunarLander-v3 --num_gpus 1 --cuda_graphs off",
                      True),
    "dqn_lunar_cpu": ("--model_name dqn --gym_id LunarLander-v3", False),
    "sac_lunar_gpu": ("--model_name sac --gym_id LunarLanderContinuous-v3 --num_gpus 1 "
                      "--cuda_graphs off", True),
    "sac_lunar_cpu": ("--model_name sac --gym_id LunarLanderContinuous-v3", False),
    # the server's updates as device rounds (--device_rounds auto on a GPU) with CUDA graphs
    "dqn_lunar_gpu_graphs": ("--model_name dqn --gym_id LunarLander-v3 --num_gpus 1 "
                             "--cuda_graphs on", True),
    "sac_lunar_gpu_graphs": ("--model_name sac --gym_id LunarLanderContinuous-v3 --num_gpus 1 "
                             "--cuda_graphs on", True),
    # FastTD3's shape: many envs, big batches, the replay buffer on the GPU (issue 50 item 3),
    # and the same settings with the buffer and the learner on the CPU, the learner given the
    # cores the runs beside it leave ({cpu_threads}: all but 4; --learner_threads auto would
    # give a process alone 2, measured on 2 cores, not a 16-core learner)
    "sac_lunar_gpu_bigbatch": ("--model_name sac --gym_id LunarLanderContinuous-v3 --num_gpus 1 "
                               "--num_envs_per_worker 64 --batch_size 4096 --utd_ratio 0.0625 "
                               "--replay_device cuda",
                               True),
    "sac_lunar_cpu_bigbatch": ("--model_name sac --gym_id LunarLanderContinuous-v3 "
                               "--num_envs_per_worker 64 --batch_size 4096 --utd_ratio 0.0625 "
                               "--learner_threads {cpu_threads}", False),
    # the same on MuJoCo (carry made with gpu_carry.sh --mujoco): HalfCheetah-v5, its preset
    "sac_cheetah_gpu": ("--model_name sac --gym_id HalfCheetah-v5 --num_gpus 1", True),
    "sac_cheetah_gpu_bigbatch": ("--model_name sac --gym_id HalfCheetah-v5 --num_gpus 1 "
                                 "--num_envs_per_worker 64 --batch_size 4096 --utd_ratio 0.0625 "
                                 "--replay_device cuda", True),
    "sac_cheetah_cpu_bigbatch": ("--model_name sac --gym_id HalfCheetah-v5 "
                                 "--num_envs_per_worker 64 --batch_size 4096 --utd_ratio 0.0625 "
                                 "--learner_threads {cpu_threads}", False),
    # a user's batched simulator on the GPU (examples/batched_sim/point_mass.py): 1,024 point
    # masses stepped in torch on cuda, PPO's gradients on the GPU too, acting on the CPU
    "ppo_pointmass_gpu": ("--user_dir examples/batched_sim --env_name point_mass --config none "
                          "--pm_device cuda --num_gpus 1 --num_workers 0 "
                          "--num_envs_per_worker 1024 --rollout_steps 16 --batch_size 4096 "
                          "--num_epochs 4 --total_steps 3000000", True),
    # the same simulator in two Ray workers (each steps its 1,024 envs on the GPU: Ray hides no
    # GPU from an actor that reserves none) with APPO's learner on the GPU in the driver
    "appo_pointmass_gpu": ("--user_dir examples/batched_sim --env_name point_mass --config none "
                           "--pm_device cuda --model_name appo --num_gpus 1 --num_workers 2 "
                           "--num_envs_per_worker 1024 --rollout_steps 16 "
                           "--total_steps 3000000", True),
    "sac_lunar_gpu_compiled": ("--model_name sac --gym_id LunarLanderContinuous-v3 --num_gpus 1 "
                               "--cuda_graphs on --compile_update on", True),
}

#: The runs --dry_run makes: with the GPU flags dropped a "_cpu" twin is its "_gpu" run again,
#: and the seed line as typed is its --no-elastic_start form with the in-process worker first
#: (tests/test_e2e.py runs that start); the suite's time is better spent elsewhere.
DRY_RUNS = ("ppo_seed_line_ray", "dqn_lunar_gpu", "sac_lunar_gpu")

#: What --dry_run changes, besides dropping --gpu/--num_gpus: small budgets on 2 CPUs.
DRY_LEARNING = {
    "ppo": "--num_cpus 2 --num_workers 2 --total_steps 384 --eval_interval 192 "
           "--eval_episodes 1 --num_epochs 2",
    "dqn": "--total_steps 600 --learning_starts 200 --eval_interval 300 --eval_episodes 1 "
           "--dqn_hidden_sizes 32,32",
    "sac": "--total_steps 600 --learning_starts 200 --start_steps 200 --eval_interval 300 "
           "--eval_episodes 1 --sac_hidden_sizes 32,32",
    # (by a run's whole name first) one PPO round of the 1,024 point masses, in this process
    "ppo_pointmass_gpu": "--total_steps 16384 --eval_interval 16384 --eval_episodes 1",
    "appo_pointmass_gpu": "--num_envs_per_worker 256 --total_steps 32768 --eval_interval 16384 "
                          "--eval_episodes 1",
}
#: flags a dry run drops with their values: the GPU's, and a simulator's own device
DRY_DROPPED = ("--gpu", "--num_gpus", "--num_cpus", "--pm_device")

#: (workload, mode, device, threads, precision) of the updates phase; "all" = every core.
#: The replay workloads' modes (benchmarks/probes/learning_speed.py): one update per call
#: waiting on the device as it goes (server), the preset's updates per call as one device
#: round (rounds), the same with CUDA graphs (graphs).
UPDATE_CONFIGS = [
    ("ppo-atari", "device", "cuda", 1, None), ("ppo-atari", "device", "cpu", "all", None),
    ("dqn-atari", "server", "cuda", 1, None), ("dqn-atari", "rounds", "cuda", 1, None),
    ("dqn-atari", "graphs", "cuda", 1, None), ("dqn-atari", "server", "cpu", "all", None),
    ("sac-lunar", "server", "cuda", 1, "fp32"), ("sac-lunar", "rounds", "cuda", 1, "fp32"),
    ("sac-lunar", "graphs", "cuda", 1, "fp32"), ("sac-lunar", "graphs", "cuda", 1, "bf16"),
    ("sac-lunar", "server", "cpu", 1, "fp32"), ("sac-lunar", "server", "cpu", "all", "fp32"),
    ("dqn-lunar", "server", "cuda", 1, None), ("dqn-lunar", "rounds", "cuda", 1, None),
    ("dqn-lunar", "graphs", "cuda", 1, None), ("dqn-lunar", "server", "cpu", 1, None),
    # torch.compile of the loss inside the graph (--compile_update on; not in a dry run)
    ("sac-lunar", "graphs_compiled", "cuda", 1, "fp32"),
    ("dqn-lunar", "graphs_compiled", "cuda", 1, None),
    ("dqn-atari", "graphs_compiled", "cuda", 1, None),
    # the Atari updates in bf16 (--ppo_precision, --dqn_precision; not in a dry run: emulated
    # bf16 on an AVX2 CPU makes the CNN's update many seconds)
    ("ppo-atari", "device", "cuda", 1, "bf16"), ("dqn-atari", "graphs", "cuda", 1, "bf16"),
]
#: modes a dry run leaves out: inductor's compile on the CPU takes ~40 s a configuration
#: (tests/test_device_rounds.py checks --compile_update's plumbing with aot_eager)
DRY_SKIPPED_MODES = ("compiled", "graphs_compiled")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "gpu-check"),
                   help="folder for gpu_check.json, gpu_check.md, log.txt, runs.tar.gz")
    p.add_argument("--work", default=None,
                   help="folder for the runs themselves (default OUT/runs; on the GPU machine "
                        "keep it outside OUT, which sends back few files)")
    p.add_argument("--dry_run", action="store_true",
                   help="the same phases on the CPU with tiny budgets (CI runs this)")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                   help="the phases to run, in this order (default: %(default)s)")
    p.add_argument("--learning_seconds", type=float, default=None,
                   help="--max_time of each learning run (default 240; --dry_run 60 as a cap)")
    p.add_argument("--update_seconds", type=float, default=None,
                   help="timed seconds per update configuration (default 5; --dry_run 0.2)")
    p.add_argument("--scaling_seconds", type=float, default=None,
                   help="--seconds of each scaling point: its cap while --scaling_window is on "
                        "(default 100; --dry_run 60), its length when off (45 was the default "
                        "then: on the H100 machine 16 workers took over 20 s to start, importing "
                        "CUDA's torch, and 25-s points left windows of 1-10 s)")
    p.add_argument("--scaling_window", type=float, default=None,
                   help="seconds of steady state each scaling point measures, counted from the "
                        "moment all its workers are up and 15 s have passed (none in a dry run); "
                        "the run is then stopped (scaling.py --window). 0: fixed-length points "
                        "(default 25; --dry_run 6)")
    p.add_argument("--runs", nargs="+", choices=list(LEARNING_RUNS), default=None,
                   help="the learning runs to make (default: all)")
    p.add_argument("--scaling_systems", nargs="+", choices=["ppo", "dqn"], default=None,
                   help="systems of the scaling phase (default ppo dqn; --dry_run ppo)")
    p.add_argument("--scaling_workers", type=int, nargs="+", default=None,
                   help="worker counts of the scaling phase (default 8 16; --dry_run 2)")
    p.add_argument("--commit", default=None,
                   help="the commit to record (default: git's; a copied tree may have no .git)")
    p.add_argument("--export_check", nargs="+", metavar="RUN_DIR",
                   help=argparse.SUPPRESS)  # the export phase's child process
    return p.parse_args(argv)


class Check:
    """The results so far, written after every phase; a console log beside them."""

    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.runs = os.path.abspath(args.work or os.path.join(self.out, "runs"))
        os.makedirs(self.out, exist_ok=True)
        os.makedirs(self.runs, exist_ok=True)
        self.started = time.time()
        self.results = {"dry_run": args.dry_run, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "command": shlex.join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
                        "commit": args.commit or git_commit(), "phases": {}}
        self.log_file = open(os.path.join(self.out, "log.txt"), "a")

    def log(self, text):
        line = f"[gpu_check {time.time() - self.started:6.1f} s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def record(self, phase, value):
        self.results["phases"][phase] = value
        self.results["elapsed_s"] = round(time.time() - self.started, 1)
        with open(os.path.join(self.out, "gpu_check.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        with open(os.path.join(self.out, "gpu_check.md"), "w") as f:
            f.write(markdown(self.results))

    def run_phase(self, phase, function):
        self.log(f"phase {phase}")
        t0 = time.time()
        try:
            value = function(self)
            value = {"ok": True, **value} if isinstance(value, dict) else {"ok": True,
                                                                           "value": value}
        except Exception as exc:  # noqa: BLE001 - one phase failing must not end the check
            import traceback
            value = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-3000:]}
            self.log(f"phase {phase} failed: {value['error']}")
        value["phase_seconds"] = round(time.time() - t0, 1)
        self.record(phase, value)

    def pack_runs(self):
        """runs.tar.gz: each run's text files (no checkpoints, no event files)."""
        keep = ("metrics.csv", "summary.json", "config.yaml", "stdout.log", "stderr.log",
                "README.md", "scaling.json")
        with tarfile.open(os.path.join(self.out, "runs.tar.gz"), "w:gz") as tar:
            for root, _, files in os.walk(self.runs):
                for name in files:
                    if name in keep or name.endswith(".onnx.json"):
                        path = os.path.join(root, name)
                        tar.add(path, arcname=os.path.join(
                            "runs", os.path.relpath(path, self.runs)))


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# -- probe --------------------------------------------------------------------------------------
def probe(check):
    import torch
    flags = set()
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    info = {"cpu": cpu, "cores": os.cpu_count(),
            "cpu_flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_tile",
                                         "amx_bf16"}),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "ray": version("ray"),
            "gymnasium": version("gymnasium"), "numpy": version("numpy"),
            "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2 ** 30, 1),
                    gpu_capability=f"{props.major}.{props.minor}",
                    gpu_multiprocessors=props.multi_processor_count,
                    bf16_supported=torch.cuda.is_bf16_supported())
        a = torch.randn(1024, 1024, device="cuda")
        info["cuda_matmul_ok"] = bool(torch.isfinite(a @ a).all().item())
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi"] = f"not run: {exc}"
    check.log(f"{info.get('gpu', 'no GPU')}; {cpu}, {os.cpu_count()} cores; torch "
              f"{torch.__version__} (CUDA {torch.version.cuda}), ray {info['ray']}")
    return info


# -- learning -----------------------------------------------------------------------------------
def learning_argv(check, name, flags, run_dir, seconds):
    """main.py's argv for one learning run: its flags, a seed, --max_time; --dry_run drops the
    GPU flags and adds DRY_LEARNING's budget."""
    cores = os.cpu_count() or 1
    words = shlex.split(flags.replace("{cpu_threads}", str(max(1, cores - 4))))
    if check.args.dry_run:
        words = [w for i, w in enumerate(words)
                 if w not in DRY_DROPPED and (i == 0 or words[i - 1] not in DRY_DROPPED)]
        words += shlex.split(DRY_LEARNING.get(name) or DRY_LEARNING[name.split("_")[0]])
    return [sys.executable, "main.py", *words, "--seed", "0", "--max_time", f"{seconds:g}",
            "--no-tensorboard", "--run_dir", run_dir]


def eval_curve(run_dir):
    """[(env steps, wall time s, eval return)] of a run's metrics.csv."""
    import csv
    try:
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    return [(int(float(r["env_steps"])), round(float(r["wall_time_s"]), 1),
             round(float(r["eval_return"]), 2)) for r in rows if r.get("eval_return")]


def learning(check):
    seconds = check.args.learning_seconds or (60 if check.args.dry_run else 240)
    procs = {}
    for name, (flags, on_gpu) in LEARNING_RUNS.items():
        if check.args.runs and name not in check.args.runs:
            continue
        if check.args.dry_run and not check.args.runs and name not in DRY_RUNS:
            continue
        run_dir = os.path.join(check.runs, name)
        argv = learning_argv(check, name, flags, run_dir, seconds)
        os.makedirs(run_dir, exist_ok=True)
        out = open(os.path.join(run_dir, "stdout.log"), "w")
        err = open(os.path.join(run_dir, "stderr.log"), "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs[name] = (subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, env=env,
                                        start_new_session=True), argv, run_dir, on_gpu, out, err)
        check.log(f"started {name}: {shlex.join(argv[1:])}")
    runs, deadline = {}, time.time() + seconds + 90  # a final evaluation, Ray's shutdown
    for name, (proc, argv, run_dir, on_gpu, out, err) in procs.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        end_process_group(proc)
        out.close()
        err.close()
        runs[name] = run_record(name, argv, run_dir, on_gpu, proc.returncode, timed_out)
        summary = runs[name].get("summary") or {}
        check.log(f"{name}: rc {proc.returncode}, stopped {summary.get('stopped_because')}, "
                  f"best eval {summary.get('best_eval_return')}, time to target "
                  f"{summary.get('time_to_target_s')}, devices "
                  f"{[d.get('device') for d in summary.get('devices') or []]}")
    return {"max_time_s": seconds, "runs": runs}


def run_record(name, argv, run_dir, on_gpu, returncode, timed_out):
    record = {"command": shlex.join(["python"] + argv[1:]), "learner_on_gpu": on_gpu,
              "returncode": returncode, "timed_out": timed_out}
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        record["summary"] = {k: summary.get(k) for k in (
            "stopped_because", "env_steps", "wall_time_s", "steps_per_s", "target_return",
            "best_eval_return", "last_eval_return", "time_to_target_s", "steps_to_target",
            "devices", "error")}
    except (OSError, ValueError):
        record["summary"] = None
    record["eval_curve"] = eval_curve(run_dir)
    if returncode != 0:
        with open(os.path.join(run_dir, "stderr.log")) as f:
            record["stderr_tail"] = f.read()[-2500:]
    return record


# -- updates ------------------------------------------------------------------------------------
def updates(check):
    from probes.learning_speed import compare_modes, measure
    import torch
    seconds = check.args.update_seconds or (0.2 if check.args.dry_run else 5.0)
    cores = os.cpu_count() or 1
    results = []
    for workload, mode, device, threads, precision in UPDATE_CONFIGS:
        if check.args.dry_run:
            if mode in DRY_SKIPPED_MODES or (workload.endswith("-atari") and precision == "bf16"):
                results.append({"workload": workload, "mode": mode, "device": device,
                                "threads": threads, "precision": precision or "fp32",
                                "skipped": "not in a dry run"})
                continue
            if device == "cuda" or threads == "all":  # the CPU stands in, on one thread
                device, threads = "cpu", 1
        threads = cores if threads == "all" else threads
        config = dict(workload=workload, device=device, seconds=seconds, threads=threads,
                      warmup=1 if check.args.dry_run else 5)
        if mode is not None:
            config["mode"] = mode
        if precision is not None:
            config["precision"] = precision
        if device == "cuda" and not torch.cuda.is_available():
            results.append({**config, "skipped": "no CUDA device"})
            continue
        try:
            result = measure(**config)
        except Exception as exc:  # noqa: BLE001 - the other configurations still run
            result = {**config, "error": f"{type(exc).__name__}: {exc}"}
        results.append(result)
        check.log(f"{workload} {mode or ''} {device} x{threads} {precision or ''}: "
                  f"{result.get('samples_per_s', result.get('error', result.get('skipped')))}")
    # CUDA graphs must compute what eager rounds compute: DQN's update draws no noise
    device = "cpu" if check.args.dry_run or not torch.cuda.is_available() else "cuda"
    try:
        match = compare_modes("dqn-lunar", device, updates=40)
    except Exception as exc:  # noqa: BLE001 - reported, the phase goes on
        match = {"error": f"{type(exc).__name__}: {exc}"}
    check.log(f"dqn-lunar rounds against graphs on {device}: {match}")
    torch.set_num_threads(1)
    return {"seconds_each": seconds, "results": results, "graphs_match": match}


# -- scaling ------------------------------------------------------------------------------------
def scaling(check):
    # each point measures a window of steady state once all its workers are up: how long they take
    # to start is not ours to know (a dry run's 2 workers beside the e2e tier's other file on
    # 2 cores: 7-21 s; 16 workers importing CUDA's torch on the H100 machine: over 20 s)
    window = check.args.scaling_window
    window = (6 if check.args.dry_run else 25) if window is None else window
    seconds = check.args.scaling_seconds or (
        (60 if check.args.dry_run else 100) if window else 45)
    warmup = (0 if check.args.dry_run else 15) if window else 0.35 * seconds
    workers = check.args.scaling_workers or ([2] if check.args.dry_run else [8, 16])
    systems = check.args.scaling_systems or (["ppo"] if check.args.dry_run else ["ppo", "dqn"])
    out = os.path.join(check.runs, "scaling", "scaling.json")
    argv = [sys.executable, "benchmarks/scaling.py", "--systems", *systems, "--placements",
            "worker", "--workers", *map(str, workers), "--seconds", f"{seconds:g}",
            "--warmup_frac", f"{warmup / seconds:.4g}", "--min_window", f"{min(10, window or 10):g}",
            "--cooldown", "2", "--out", out, "--extra", "--eval_interval 1000000000"
            ] + (["--window", f"{window:g}"] if window else [])  # no evaluation inside the window
    check.log(f"scaling: {shlex.join(argv[1:])}")
    budget = len(workers) * len(systems) * (seconds + 60) + 30
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=budget)
    if proc.returncode != 0:
        raise RuntimeError(f"scaling.py exited {proc.returncode}: {proc.stderr[-1500:]}")
    with open(out) as f:
        data = json.load(f)
    points = [{k: p.get(k) for k in ("system", "n", "steps_per_s", "limit_steps_per_s",
                                     "efficiency", "workers_min", "workers_max", "window_s",
                                     "short_window", "all_workers_up_s", "stopped_at_window",
                                     "returncode", "cmd")}
              for p in data["points"]]
    for p in points:
        check.log(f"scaling {p['system']} N={p['n']}: {p['steps_per_s']} steps/s, "
                  f"efficiency {p['efficiency']}")
    alone = data.get("env_alone_steps_per_s")
    check.log(f"scaling: the env alone {alone} steps/s")
    return {"seconds_per_point": seconds, "window_s": window or None,
            "env_alone_steps_per_s": alone, "points": points}


# -- export -------------------------------------------------------------------------------------
def export(check):
    """The GPU-trained runs, in one process that sees no GPU (``export_check``)."""
    names = [name for name, (_, on_gpu) in LEARNING_RUNS.items()
             if on_gpu and name != "ppo_seed_line"]  # the seed line's twin is exported
    results = {name: {"skipped": "no checkpoint (the learning phase did not run it)"}
               for name in names
               if not glob.glob(os.path.join(check.runs, name, "checkpoints", "*.pt"))}
    todo = [os.path.join(check.runs, name) for name in names if name not in results]
    # one child per run, side by side: each is mostly torch's and onnx's imports on one core
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    children = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--export_check",
                                  run_dir], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for run_dir in todo]
    for child in children:
        out, err = child.communicate(timeout=300)
        try:
            results.update(json.loads(out.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            raise RuntimeError(f"the export child exited {child.returncode}: "
                               f"{err[-1500:]}") from None
    for name in names:
        check.log(f"export {name}: {results[name]}")
    return {"runs": {name: results[name] for name in names}}


def export_check(run_dirs):
    """In a process that sees no GPU, for each run: load its policy, play two episodes, export
    it to ONNX and compare the ONNX program's actions with the policy's on 64 observations.
    Prints {run name: result} as one JSON line."""
    results = {}
    for run_dir in run_dirs:
        try:
            results[os.path.basename(run_dir)] = check_one_export(run_dir)
        except Exception as exc:  # noqa: BLE001 - reported per run
            results[os.path.basename(run_dir)] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))
    return 0


def check_one_export(run_dir):
    import numpy as np
    import onnxruntime
    import torch
    import yaml
    import ddrl
    result = {"cuda_visible": torch.cuda.is_available()}
    # a simulator that ran on the GPU is stepped on the CPU here, as a user without one would
    # (ddrl.load's flags override the run's: `ddrl evaluate RUN --pm_device cpu` the same)
    with open(os.path.join(run_dir, "config.yaml")) as f:
        config = yaml.safe_load(f) or {}
    overrides = {"pm_device": "cpu"} if config.get("pm_device", "cpu") != "cpu" else {}
    if overrides:
        result["overrides"] = overrides
    policy = ddrl.load(run_dir, **overrides)
    result["returns"] = [round(r, 2) for r in policy.play(episodes=2)]
    onnx_file = os.path.join(run_dir, "policy.onnx")
    sidecar = policy.export(onnx_file, "onnx")
    env = policy.make_env(seed=123)
    obs, _ = env.reset(seed=123)
    batch = []
    for _ in range(64):
        batch.append(np.asarray(obs, dtype=np.float32))
        obs, _, terminated, truncated, _ = env.step(policy.act(obs))
        if terminated or truncated:
            obs, _ = env.reset()
    batch = np.stack(batch)
    expected = np.asarray(policy.act(batch))
    session = onnxruntime.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    got = session.run(None, {sidecar["inputs"][0]["name"]: batch})[0].reshape(expected.shape)
    result["onnx_matches"] = bool(np.allclose(got, expected, atol=1e-4))
    result["onnx_max_abs_diff"] = float(np.max(np.abs(got.astype(np.float64) - expected)))
    result["model"] = sidecar.get("model")
    return result


# -- the report ---------------------------------------------------------------------------------
def fmt(value, spec=",.1f", none="-"):
    return none if value is None else format(value, spec)


def markdown(results):
    phases = results["phases"]
    lines = [f"# GPU check{' (dry run: CPU as the device)' if results['dry_run'] else ''}", "",
             f"`{results['command']}` at commit `{results['commit']}`, {results['started']}.", ""]
    machine = phases.get("probe", {})
    if machine.get("ok"):
        lines += [f"Machine: {machine.get('gpu', 'no GPU')}"
                  + (f" ({machine['gpu_memory_gib']} GiB, capability "
                     f"{machine['gpu_capability']})" if machine.get("gpu") else "")
                  + f"; {machine['cpu']}, {machine['cores']} cores "
                  f"({', '.join(machine['cpu_flags']) or 'no AVX2'}); Python "
                  f"{machine['python']}, torch {machine['torch']} (CUDA "
                  f"{machine['torch_cuda']}), Ray {machine['ray']}, gymnasium "
                  f"{machine['gymnasium']}.", ""]
    learn = phases.get("learning", {})
    if learn.get("runs"):
        lines += [f"## Learning runs, side by side, --max_time {learn['max_time_s']:g} s", "",
                  "| run | updates computed on | stopped | reached | time to target (s) | "
                  "env steps to target | best eval | env steps/s | peak CUDA MB |",
                  "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for name, run in learn["runs"].items():
            s = run.get("summary") or {}
            devices = s.get("devices") or []
            where = ", ".join(sorted({d.get("cuda_device") or d.get("device", "?")
                                      for d in devices})) or "?"
            peak = max((d.get("max_memory_allocated_mb") or 0 for d in devices), default=0)
            how = [label for key, label in (("device_rounds", "rounds"), ("cuda_graphs", "graphs"))
                   if any(d.get(key) for d in devices)]
            where += f"; {', '.join(how)}" if how else ""
            reached = s.get("time_to_target_s") is not None
            lines.append(
                f"| {name} | {where} ({len(devices)} part{'s' if len(devices) != 1 else ''}) | "
                f"{s.get('stopped_because', 'rc ' + str(run['returncode']))} | "
                f"{'yes' if reached else 'no'} | {fmt(s.get('time_to_target_s'))} | "
                f"{fmt(s.get('steps_to_target'), ',.0f')} | {fmt(s.get('best_eval_return'))} | "
                f"{fmt(s.get('steps_per_s'), ',.0f')} | {fmt(peak or None)} |")
        lines += [""] + [f"- `{name}`: `{run['command']}`" for name, run in learn["runs"].items()]
        lines.append("")
    upd = phases.get("updates", {})
    if upd.get("results"):
        lines += ["## Learning throughput of one update (ddrl's update code)", "",
                  "| workload | mode | device | threads | precision | batch | updates/s | "
                  "samples/s | ms/update | peak CUDA MB |",
                  "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in upd["results"]:
            note = r.get("skipped") or r.get("error")
            lines.append(
                f"| {r['workload']} | {r.get('mode', '-')} | {r.get('device_name') or r['device']}"
                f" | {r['threads']} | {r.get('precision', '-')} | {r.get('batch', '-')} | "
                + (f"{note} | | | |" if note else
                   f"{fmt(r.get('updates_per_s'))} | {fmt(r.get('samples_per_s'), ',.0f')} | "
                   f"{fmt(r.get('median_update_ms'), '.2f')} | "
                   f"{fmt(r.get('max_memory_allocated_mb'))} |"))
        lines.append("")
        match = upd.get("graphs_match") or {}
        if match:
            lines += [f"CUDA graphs against eager rounds (dqn-lunar, {match.get('updates')} "
                      f"updates on the same batches, {match.get('device')}): "
                      + (match["error"] if "error" in match else
                         f"weights differ by at most {match['weights_max_abs_diff']:.3g} "
                         f"(largest weight {match['weights_max_abs']:.3g}); graphs used: "
                         f"{match.get('cuda_graphs_used')}"
                         + (f" ({match['cuda_graphs_error']})"
                            if match.get("cuda_graphs_error") else "")), ""]
    scale = phases.get("scaling", {})
    if scale.get("points"):
        span = (f"a {scale['window_s']:g}-s window once all workers are up"
                if scale.get("window_s") else f"{scale['seconds_per_point']:g} s a point")
        lines += [f"## Scaling, 5 ms env, {span}", "",
                  "| system | N | env steps/s | share of N x 200 | window (s) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for p in scale["points"]:
            lines.append(f"| {p['system']} | {p['n']} | {fmt(p['steps_per_s'], ',.0f')} | "
                         f"{fmt(None if p['efficiency'] is None else 100 * p['efficiency'], '.0f')}"
                         f"% | {fmt(p['window_s'], '.1f')} |")
        if scale.get("env_alone_steps_per_s"):
            alone = scale["env_alone_steps_per_s"]
            lines += ["", f"The env alone, a bare loop in one process: {alone:,.1f} steps/s "
                          f"({alone / 2:.1f}% of 200): the ceiling of every share."]
        lines.append("")
    exp = phases.get("export", {})
    if exp.get("runs"):
        lines += ["## Trained on the GPU, used without one", "",
                  "| run | loaded where CUDA is hidden | returns of 2 episodes | ONNX acts as the "
                  "policy (max abs diff) |", "| --- | --- | --- | --- |"]
        for name, r in exp["runs"].items():
            note = r.get("skipped") or r.get("error")
            lines.append(f"| {name} | " + (f"{note} | | |" if note else
                         f"{'yes' if not r['cuda_visible'] else 'CUDA was visible'} | "
                         f"{r['returns']} | {r['onnx_matches']} ({r['onnx_max_abs_diff']:.2g}) |"))
        lines.append("")
    failed = [f"{name}: {p['error']}" for name, p in phases.items() if not p.get("ok")]
    if failed:
        lines += ["## Phases that failed", ""] + [f"- {f}" for f in failed] + [""]
    return "\n".join(lines)


PHASE_FUNCTIONS = {"probe": probe, "learning": learning, "updates": updates, "scaling": scaling,
                   "export": export}


def main(argv=None):
    args = parse_args(argv)
    if args.export_check:
        return export_check(args.export_check)
    check = Check(args)
    check.log(f"{'dry run, ' if args.dry_run else ''}phases {' '.join(args.phases)}; out "
              f"{check.out}")
    for phase in dict.fromkeys(args.phases):  # in the order given
        check.run_phase(phase, PHASE_FUNCTIONS[phase])
    check.pack_runs()
    failed = [name for name, p in check.results["phases"].items() if not p.get("ok")]
    check.log(f"done in {time.time() - check.started:.0f} s; "
              + (f"failed phases: {', '.join(failed)}" if failed else "every phase ran")
              + f"; {os.path.join(check.out, 'gpu_check.md')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
