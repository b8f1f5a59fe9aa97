"""PPO training throughput on a batched CartPole, every system on the same fixed settings.

    .venv/bin/python benchmarks/probe.py vector-ppo --out benchmarks/results/vector-ppo.json

The settings (the batched-simulators issue's): gymnasium's native CartPoleVectorEnv, 256 envs x
32 steps per round, 1 epoch, minibatches of 2,048 (4 per round), a 64x64 tanh actor and critic,
Adam at lr 1e-3, gamma 0.99, GAE lambda 0.95, clip 0.2, value coefficient 0.5, gradient norm
0.5, one torch thread, --steps env steps. Each system runs in a process of its own, one after
another (never side by side: the machine has 2 cores), ``--repeats`` times in turn:

- ``floor``: a minimal single-file PPO written here in CleanRL's shape (this file's
  ``floor_ppo``: the vector env, a torch policy, GAE, one epoch of minibatches): the practical
  limit on one core, what ddrl is measured against.
- ``ddrl-vector``: ``main.py --num_workers 0 --vectorize native`` (the batched env in the
  learner's process: nothing crosses Ray), the same settings as flags.
- ``ddrl-per-env``: the same run stepping 256 single CartPole envs one by one
  (``--vectorize none``): ddrl's per-env path.
- ``sb3``: Stable-Baselines3's PPO on a DummyVecEnv of 256 CartPoles (SB3 takes its own VecEnv,
  not gymnasium's vector envs), same settings (when stable-baselines3 is installed:
  benchmarks/requirements.txt).
- ``sample-factory``: Sample Factory 2.1.1's APPO, its CartPole example
  (``sf_examples.train_gym_env``), in a venv of its own (its gymnasium pin is 0.29;
  ``--sf_python`` names that venv's python: ``python3.11 -m venv /tmp/sfvenv &&
  /tmp/sfvenv/bin/pip install torch==2.13.0 sample-factory==2.1.1``): 2 rollout workers x 128
  envs, rollout 32, batch 2,048, 4 batches per epoch, 1 epoch, no RNN, separate 64x64 tanh actor
  and critic, no input or return normalization, the same lr, gamma, lambda, clip, value
  coefficient and gradient norm, on the CPU. Its throughput is read from its log ("Total num
  frames" with their timestamps, first report to last).

With ``--env_only``: the simulator alone instead, gymnasium's CartPoleVectorEnv stepped with
random actions (one ``action_space.sample()`` per step) at 64, 256, 512 and 4,096 envs, and
SyncVectorEnv over 8 CartPole-v1 envs, 3 s each: the limit training is a fraction of.

Reported per system and repeat: the training throughput (env steps per second between the end of
the first round and the end of the run: the loop itself, without interpreter start, imports
and building), the whole process's wall time, and the last training returns (a check that each
system learns the same task, not a target). Median over repeats, and each system's share of the
floor's throughput.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from probes import REPO, command, git_commit

SYSTEMS = ("floor", "ddrl-vector", "ddrl-per-env", "sb3", "sample-factory")
SETTINGS = dict(num_envs=256, rollout_steps=32, num_epochs=1, minibatch=2048, lr=1e-3,
                gamma=0.99, gae_lambda=0.95, clip=0.2, vf_coef=0.5, max_grad_norm=0.5)


def add_args(p):
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS[:4]))
    p.add_argument("--sf_python", default=None,
                   help="the python of a venv with sample-factory==2.1.1 (system sample-factory)")
    p.add_argument("--steps", type=int, default=2_000_000, help="env steps per run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="results JSON (default: print only)")
    p.add_argument("--env_only", action="store_true",
                   help="measure the simulator alone (random actions) instead")
    p.add_argument("--one", choices=SYSTEMS, help=argparse_hidden())


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


# -- the floor: a minimal single-file PPO ----------------------------------------------------------
def floor_ppo(steps, seed):
    """CleanRL's ppo.py shape on the native vector env; (env steps/s after the first round,
    the last rounds' mean training return)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn
    s = SETTINGS
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    envs = gym.make_vec("CartPole-v1", num_envs=s["num_envs"],
                        vectorization_mode="vector_entry_point")
    n, T = s["num_envs"], s["rollout_steps"]

    def mlp(out):
        return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                             nn.Linear(64, out))
    actor, critic = mlp(2), mlp(1)
    params = list(actor.parameters()) + list(critic.parameters())
    optimizer = torch.optim.Adam(params, lr=s["lr"], eps=1e-5)
    obs_buf = torch.zeros((T, n, 4))
    act_buf = torch.zeros((T, n), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((T, n)) for _ in range(4))
    obs, _ = envs.reset(seed=seed)
    obs = torch.as_tensor(obs)
    done = torch.zeros(n)
    returns, ep_return, finished = [], np.zeros(n), []
    global_step, t_first = 0, None
    while global_step < steps:
        for t in range(T):
            obs_buf[t], done_buf[t] = obs, done
            with torch.no_grad():
                logits = actor(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                logp_buf[t], val_buf[t] = dist.log_prob(action), critic(obs).squeeze(-1)
            act_buf[t] = action
            next_obs, reward, term, trunc, _ = envs.step(action.numpy())
            rew_buf[t] = torch.as_tensor(reward, dtype=torch.float32)
            ended = np.logical_or(term, trunc)
            ep_return += reward
            finished.extend(ep_return[ended].tolist())
            ep_return[ended] = 0.0
            obs = torch.as_tensor(next_obs)
            done = torch.as_tensor(ended, dtype=torch.float32)
        global_step += T * n
        with torch.no_grad():  # GAE
            next_value = critic(obs).squeeze(-1)
            adv = torch.zeros((T, n))
            last = torch.zeros(n)
            for t in reversed(range(T)):
                not_done = 1.0 - (done if t == T - 1 else done_buf[t + 1])
                nv = next_value if t == T - 1 else val_buf[t + 1]
                delta = rew_buf[t] + s["gamma"] * nv * not_done - val_buf[t]
                last = delta + s["gamma"] * s["gae_lambda"] * not_done * last
                adv[t] = last
            ret = adv + val_buf
        b_obs, b_act = obs_buf.reshape(-1, 4), act_buf.reshape(-1)
        b_logp, b_adv, b_ret = logp_buf.reshape(-1), adv.reshape(-1), ret.reshape(-1)
        order = torch.randperm(T * n)
        for _ in range(s["num_epochs"]):
            for start in range(0, T * n, s["minibatch"]):
                mb = order[start:start + s["minibatch"]]
                dist = torch.distributions.Categorical(logits=actor(b_obs[mb]))
                ratio = (dist.log_prob(b_act[mb]) - b_logp[mb]).exp()
                a = b_adv[mb]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(-a * ratio,
                               -a * ratio.clamp(1 - s["clip"], 1 + s["clip"])).mean()
                v_loss = 0.5 * ((critic(b_obs[mb]).squeeze(-1) - b_ret[mb]) ** 2).mean()
                loss = pg + s["vf_coef"] * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, s["max_grad_norm"])
                optimizer.step()
        if t_first is None:
            t_first, steps_first = time.perf_counter(), global_step
        returns.append(float(np.mean(finished[-200:])) if finished else None)
    elapsed = time.perf_counter() - t_first
    return (global_step - steps_first) / elapsed, returns[-1]


# -- ddrl and SB3 -------------------------------------------------------------------------------
def ddrl_argv(vectorize, steps, seed, run_dir):
    s = SETTINGS
    return [sys.executable, os.path.join(REPO, "main.py"), "--num_workers", "0",
            "--num_envs_per_worker", str(s["num_envs"]), "--vectorize", vectorize,
            "--rollout_steps", str(s["rollout_steps"]), "--num_epochs", str(s["num_epochs"]),
            "--batch_size", str(s["minibatch"]), "--lr", str(s["lr"]),
            "--lr_schedule", "constant", "--clip_schedule", "constant",
            "--gamma", str(s["gamma"]), "--gae_lambda", str(s["gae_lambda"]),
            "--clip_range", str(s["clip"]), "--vf_coef", str(s["vf_coef"]),
            "--max_grad_norm", str(s["max_grad_norm"]), "--total_steps", str(steps),
            "--eval_interval", str(10 * steps), "--target_return", "none", "--seed", str(seed),
            "--run_dir", run_dir]


def ddrl_throughput(run_dir):
    """(env steps/s from the end of the first round to the last, the last training return)
    from the run's metrics.csv."""
    import csv
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    first, last = rows[0], rows[-1]
    rate = ((int(last["env_steps"]) - int(first["env_steps"]))
            / (float(last["wall_time_s"]) - float(first["wall_time_s"])))
    train = [float(r["train_return"]) for r in rows if r["train_return"]]
    return rate, train[-1] if train else None


def sb3_ppo(steps, seed):
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    s = SETTINGS
    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", n_envs=s["num_envs"], seed=seed)
    model = PPO("MlpPolicy", env, n_steps=s["rollout_steps"], batch_size=s["minibatch"],
                n_epochs=s["num_epochs"], learning_rate=s["lr"], gamma=s["gamma"],
                gae_lambda=s["gae_lambda"], clip_range=s["clip"], vf_coef=s["vf_coef"],
                max_grad_norm=s["max_grad_norm"], ent_coef=0.0, seed=seed, device="cpu",
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]),
                                   activation_fn=torch.nn.Tanh))

    class FirstRound(BaseCallback):
        def _on_rollout_start(self):
            if self.model.num_timesteps and not hasattr(self, "t"):
                self.t, self.n = time.perf_counter(), self.model.num_timesteps

        def _on_step(self):
            return True
    callback = FirstRound()
    model.learn(total_timesteps=steps, callback=callback)
    rate = (model.num_timesteps - callback.n) / (time.perf_counter() - callback.t)
    infos = [info["r"] for info in model.ep_info_buffer]
    return rate, (sum(infos) / len(infos) if infos else None)


def sf_argv(sf_python, steps, seed, train_dir):
    s = SETTINGS
    return [sf_python, "-m", "sf_examples.train_gym_env", "--env", "CartPole-v1",
            "--experiment", "vector-ppo", "--train_dir", train_dir, "--num_workers", "2",
            "--num_envs_per_worker", str(s["num_envs"] // 2), "--rollout",
            str(s["rollout_steps"]), "--batch_size", str(s["minibatch"]),
            "--num_batches_per_epoch", str(s["num_envs"] * s["rollout_steps"] // s["minibatch"]),
            "--num_epochs", str(s["num_epochs"]), "--use_rnn", "False",
            "--encoder_mlp_layers", "64", "64", "--nonlinearity", "tanh",
            "--actor_critic_share_weights", "False", "--learning_rate", str(s["lr"]),
            "--gamma", str(s["gamma"]), "--gae_lambda", str(s["gae_lambda"]),
            "--ppo_clip_ratio", str(s["clip"]), "--value_loss_coeff", str(s["vf_coef"]),
            "--max_grad_norm", str(s["max_grad_norm"]), "--exploration_loss_coeff", "0",
            "--normalize_input", "False", "--normalize_returns", "False",
            "--train_for_env_steps", str(steps), "--device", "cpu", "--seed", str(seed)]


def sf_throughput(log):
    """(env steps/s from its first frame count report to its last, the last average episode
    reward) from Sample Factory's log."""
    import datetime
    import re
    points, reward = [], None
    for line in log.splitlines():
        stamp = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\]", line)
        frames = re.search(r"Total num frames: (\d+)", line)
        if stamp and frames:
            when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
            points.append((when.timestamp(), int(frames.group(1))))
        found = re.search(r"Avg episode reward: \[\(0, '([-\d.]+)'\)\]", line)
        if found:
            reward = float(found.group(1))
    points = [p for p in points if p[1] > 0]
    (t0, n0), (t1, n1) = points[0], points[-1]
    return (n1 - n0) / (t1 - t0), reward


def one(system, steps, seed):
    """Runs in the child process: {"steps_per_s", "train_return"} on stdout as JSON."""
    if system == "floor":
        rate, ret = floor_ppo(steps, seed)
    elif system == "sb3":
        rate, ret = sb3_ppo(steps, seed)
    print(json.dumps({"steps_per_s": rate, "train_return": ret}))


def run_system(system, steps, seed, sf_python=None):
    start = time.perf_counter()
    if system == "sample-factory":
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(sf_argv(sf_python, steps, seed, tmp), cwd=tmp, text=True,
                                  capture_output=True, timeout=1800)
            wall = time.perf_counter() - start
            rate, ret = sf_throughput(done.stdout + done.stderr)
    elif system.startswith("ddrl"):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            vectorize = "native" if system == "ddrl-vector" else "none"
            subprocess.run(ddrl_argv(vectorize, steps, seed, run_dir), cwd=REPO, check=True,
                           stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            rate, ret = ddrl_throughput(run_dir)
    else:
        out = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "probe.py"),
                              "vector-ppo", "--one", system, "--steps", str(steps),
                              "--seed", str(seed)], cwd=REPO, check=True, text=True,
                             capture_output=True).stdout
        wall = time.perf_counter() - start
        found = json.loads(out.strip().splitlines()[-1])
        rate, ret = found["steps_per_s"], found["train_return"]
    return {"steps_per_s": rate, "wall_s": wall, "train_return": ret}


def env_only(seconds=3.0):
    """{case: env steps/s} of the simulator alone, random actions."""
    import gymnasium as gym
    cases = {f"CartPoleVectorEnv x {n}": dict(num_envs=n, vectorization_mode="vector_entry_point")
             for n in (64, 256, 512, 4096)}
    cases["SyncVectorEnv(CartPole-v1) x 8"] = dict(num_envs=8, vectorization_mode="sync")
    rates = {}
    for name, kwargs in cases.items():
        env = gym.make_vec("CartPole-v1", **kwargs)
        env.reset(seed=0)
        env.action_space.seed(0)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(50):
                env.step(env.action_space.sample())
            steps += 50 * kwargs["num_envs"]
        rates[name] = steps / (time.perf_counter() - start)
        print(f"{name:32s} {rates[name]:12,.0f} env steps/s", flush=True)
    return rates


def run(args, argv):
    if args.env_only:
        rates = env_only()
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"command": command(argv), "commit": git_commit(), "cpu": cpu_flags(),
                           "env_only": rates}, f, indent=1)
        return 0
    if args.one:
        return one(args.one, args.steps, args.seed)
    if "sample-factory" in args.systems and not args.sf_python:
        raise SystemExit("vector-ppo: the system sample-factory needs --sf_python (the "
                         "python of a venv with sample-factory==2.1.1; see -h)")
    results = {system: [] for system in args.systems}
    for repeat in range(args.repeats):
        for system in args.systems:
            found = run_system(system, args.steps, args.seed + repeat, args.sf_python)
            results[system].append(found)
            print(f"{system:13s} repeat {repeat}: {found['steps_per_s']:10,.0f} env steps/s, "
                  f"whole process {found['wall_s']:6.1f} s, train return "
                  f"{found['train_return']}", flush=True)
    summary = {s: {"median_steps_per_s": statistics.median(r["steps_per_s"] for r in rows),
                   "median_wall_s": statistics.median(r["wall_s"] for r in rows)}
               for s, rows in results.items()}
    floor = summary.get("floor", {}).get("median_steps_per_s")
    for s, row in summary.items():
        if floor:
            row["of_floor"] = row["median_steps_per_s"] / floor
        print(f"{s:13s} median {row['median_steps_per_s']:10,.0f} env steps/s"
              + (f" = {row['of_floor']:.2f}x the floor" if floor else "")
              + f", whole process {row['median_wall_s']:.1f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": command(argv), "commit": git_commit(), "settings": SETTINGS,
                       "steps": args.steps, "machine": platform.processor() or platform.machine(),
                       "cpu": cpu_flags(), "results": results, "summary": summary}, f, indent=1)
    return 0


def cpu_flags():
    """The CPU's model and the vector extensions that matter for these figures."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model is None:
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model": model, "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16",
                                                      "amx_tile"})}
