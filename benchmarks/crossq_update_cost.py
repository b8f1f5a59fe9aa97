"""Cost of one CrossQ update, ddrl (``--model_name crossq``: models/crossq.py ``step`` and the
learner's fused Adam, as the parameter server runs it) against sb3-contrib's CrossQ ``train()``
given the same hyperparameters (``benchmarks/sb3_sac.py --algo crossq --hyperparams ddrl``), on
LunarLanderContinuous-v3 shapes and random transitions, in fp32.

    .venv/bin/python benchmarks/crossq_update_cost.py --out benchmarks/results/crossq_update_cost.json

Each measurement runs in a process of its own (torch's thread pool is set once per process), the
two systems alternating ``--repeats`` times per thread count; a figure is milliseconds per
gradient step averaged over ``--updates`` steps after 30 warm-up steps (a multiple of the policy
delay, so that actor updates weigh the same in both). sb3-contrib's figure includes its replay
sampling (a batch of 256 from a full 100k buffer), ddrl's includes building the batch's tensors
from numpy: what each does per step in its own loop.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "benchmarks")]
ENV_ID = "LunarLanderContinuous-v3"

from update_cost import cpu_description, ms_per_call  # noqa: E402 (after the path)


def random_transitions(n, obs_dim, action_dim, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, obs_dim)).astype(np.float32),
            rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32),
            rng.standard_normal((n, obs_dim)).astype(np.float32),
            (rng.uniform(size=n) < 0.01).astype(np.float32))


def measure_ddrl(flags, updates):
    import numpy as np
    import gymnasium as gym
    from core.learner import Learner
    from core.replay_buffer import Transitions
    from models.crossq import CrossQModel
    from options.options import parse_args
    args = parse_args(["--env_name", "gym_env", "--model_name", "crossq", "--gym_id", ENV_ID,
                       "--sac_precision", "fp32"] + flags)
    env = gym.make(ENV_ID)
    model = CrossQModel(args, env.observation_space, env.action_space)
    learner = Learner(model)
    data = random_transitions(100_000, 8, 2)
    rng = np.random.default_rng(1)

    def update():
        rows = rng.integers(0, len(data[0]), args.batch_size)
        with model.gradients_in_place():  # as the parameter server: no copy to numpy and back
            model.step(Transitions(*(column[rows] for column in data)))
        learner.apply_in_place()  # the fused Adam step, then after_update (counts the update)

    return ms_per_call(update, updates, warmup=30)


def measure_sb3(flags, updates):
    import numpy as np
    import gymnasium as gym
    from sb3_contrib import CrossQ
    from stable_baselines3.common.logger import configure
    from sb3_sac import ddrl_hyperparameters
    kwargs, a = ddrl_hyperparameters(ENV_ID, " ".join(flags), algo="crossq")
    kwargs["buffer_size"] = 100_000
    model = CrossQ(env=gym.make(ENV_ID), seed=0, device="cpu", **kwargs)
    model.set_logger(configure(None, []))
    obs, actions, rewards, next_obs, dones = random_transitions(100_000, 8, 2)
    buffer = model.replay_buffer
    buffer.observations[:, 0] = obs
    buffer.actions[:, 0] = actions
    buffer.rewards[:, 0] = rewards
    buffer.next_observations[:, 0] = next_obs
    buffer.dones[:, 0] = dones
    buffer.full, buffer.pos = True, 0
    return ms_per_call(lambda: model.train(gradient_steps=1, batch_size=a.batch_size), updates,
                       warmup=30)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="write the results here as JSON")
    p.add_argument("--updates", type=int, default=60,
                   help="timed gradient steps per measurement (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3,
                   help="alternating measurements per system and thread count "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch threads to measure (default: 1 2)")
    p.add_argument("--ddrl_flags", default="",
                   help="ddrl flags for both systems, e.g. '--crossq_critic_sizes 256,256'")
    p.add_argument("--one", nargs=2, metavar=("SYSTEM", "THREADS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    flags = args.ddrl_flags.split()
    if args.one:
        import torch
        torch.set_num_threads(int(args.one[1]))
        measure = measure_ddrl if args.one[0] == "ddrl" else measure_sb3
        print(json.dumps(measure(flags, args.updates)))
        return
    load_before, rows = os.getloadavg()[0], []
    for threads in args.threads:
        runs = {"ddrl": [], "sb3-contrib": []}
        for _ in range(args.repeats):
            for system in runs:
                out = subprocess.run([sys.executable, __file__, "--updates", str(args.updates),
                                      "--ddrl_flags", args.ddrl_flags, "--one", system.split("-")[0],
                                      str(threads)], capture_output=True, text=True, check=True)
                runs[system].append(float(out.stdout.strip().splitlines()[-1]))
                print(f"{system:12s} threads {threads}: {runs[system][-1]:7.1f} ms/update", flush=True)
        for system, ms in runs.items():
            rows.append(dict(system=system, threads=threads, ms_per_update=[round(m, 1) for m in ms],
                             median_ms=round(statistics.median(ms), 1)))
        ratio = statistics.median(runs["ddrl"]) / statistics.median(runs["sb3-contrib"])
        print(f"threads {threads}: ddrl / sb3-contrib = {ratio:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"load_average_before": load_before, "cpu": cpu_description(),
                       "ddrl_flags": args.ddrl_flags, "updates": args.updates, "results": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
