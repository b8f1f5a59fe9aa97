import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run for hindsight experience replay: Stable-Baselines3 SAC with its HerReplayBuffer on a
goal-conditioned env, stopped at a target eval return (the sibling of sb3_sac.py: the same
evaluation callback, stop rule, time origin and summary.json / eval.csv writer).

    .venv/bin/python benchmarks/sb3_her.py --env FetchReach-v4 --seed 0 --out_dir /tmp/sb3her
    .venv/bin/python benchmarks/sb3_her.py --env FetchReach-v4 --hyperparams ddrl \\
        --ddrl_flags "--config configs/sac-her-FetchReach.yaml" --seed 0 --out_dir /tmp/sb3her_d
    .venv/bin/python benchmarks/sb3_her.py --env ddrl/PointGoal-v0 --hyperparams ddrl \\
        --ddrl_flags "--her --config none --sac_hidden_sizes 64,64" --seed 0 --out_dir /tmp/sb3her_p

--hyperparams zoo (default): RL-Zoo's HER entry for FetchReach (DLR-RM/rl-baselines3-zoo
hyperparams/sac.yml "FetchReach-v1", kept for -v4): MultiInputPolicy, 64x64 networks, batch
256, lr 1e-3, gamma 0.95, tau 0.005, buffer 1M, 1,000 random warm-up steps, one update per env
step, HER future with 4 sampled goals, 20k steps; the same for PointGoal with its 8k steps. The
entry also normalizes observations and rewards (normalize: True); not here, as ddrl's --her
refuses --normalize_obs (replay holds the env's own goals, which compute_reward needs): both
learn from the same observations.

--hyperparams ddrl: exactly the hyperparameters ddrl's main.py would train with for ``--model_name
sac --gym_id ENV`` plus --ddrl_flags (sb3_sac.py's ``ddrl_hyperparameters``: networks, learning
rates, batch, buffer, tau, gamma, warm-up, UTD), with HER's when the flags have --her
(--her_strategy -> goal_selection_strategy, --her_k -> n_sampled_goal) and plain replay when
they do not, so that a run with and one without HER compare as ddrl's do. Not expressible, so
refused (as sb3_sac.py refuses them): prioritized replay, normalized observations.

Envs: FetchReach-v4 comes from gymnasium-robotics (requirements.txt), with the mujoco shim
ddrl's gym_env installs (envs/robotics_shim.py says why; loaded as a file, so that no ddrl
package and no Ray is imported on this process's clock);
``ddrl/PointGoal-v0`` and ``ddrl/BitFlip-v0`` from envs/goal_envs.py, loaded as a file (numpy
and gymnasium only).

Writes OUT_DIR/summary.json (ddrl's keys, plus hyperparams, env, seed and the settings used) and
OUT_DIR/eval.csv (one row per evaluation: the mean return of --eval_episodes deterministic
episodes on a separate env).
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys

import gymnasium as gym
import torch
from stable_baselines3 import SAC, HerReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ppo import EvalStop, make_eval_env, write_summary  # same eval, stop rule and summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ZOO = dict(policy="MultiInputPolicy", buffer_size=1_000_000, ent_coef="auto", batch_size=256,
           gamma=0.95, learning_rate=1e-3, learning_starts=1000, tau=0.005, train_freq=1,
           gradient_steps=1, policy_kwargs=dict(net_arch=[64, 64]),
           replay_buffer_class=HerReplayBuffer,
           replay_buffer_kwargs=dict(goal_selection_strategy="future", n_sampled_goal=4))
# env: (max steps, eval_freq, target return: ddrl's preset's / the id's threshold)
PRESETS = {
    "FetchReach-v4": (20_000, 2_000, -5.0),
    "ddrl/PointGoal-v0": (8_000, 1_000, -20.0),
}


def load_file(name, path):
    """A module of the repository loaded from its file alone (no ddrl package, no Ray)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def register_envs(env_id):
    """Register the id's envs with gymnasium: ddrl's goal toys from their file, or
    gymnasium-robotics (its import notice silenced, as ddrl's gym_env does) with the fix."""
    if env_id.startswith("ddrl/"):
        if REPO not in sys.path:
            sys.path.append(REPO)
        load_file("ddrl_goal_envs", ("envs", "goal_envs.py"))
        return
    with contextlib.redirect_stderr(io.StringIO()):
        import gymnasium_robotics
    gym.register_envs(gymnasium_robotics)
    load_file("ddrl_robotics_shim", ("envs", "robotics_shim.py")).fix_robotics_joint_types()


def ddrl_settings(env_id, ddrl_flags):
    """SB3 SAC keyword arguments equal to ddrl's run (the module docstring), and ddrl's args."""
    from sb3_sac import ddrl_hyperparameters
    kwargs, a = ddrl_hyperparameters(env_id, ddrl_flags)
    kwargs["policy"] = "MultiInputPolicy"
    if a.her:
        kwargs.update(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(
            goal_selection_strategy=a.her_strategy, n_sampled_goal=a.her_k))
    return kwargs, a


def plain(o):
    """JSON-able settings (classes and schedules by name)."""
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    return getattr(o, "__name__", str(o))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="FetchReach-v4", choices=sorted(PRESETS))
    p.add_argument("--hyperparams", choices=["zoo", "ddrl"], default="zoo",
                   help="zoo: RL-Zoo's HER entry (the docstring); ddrl: ddrl's own settings "
                        "for this env and --ddrl_flags")
    p.add_argument("--ddrl_flags", default="",
                   help="with --hyperparams ddrl: the ddrl flags of the compared run, e.g. "
                        "\"--config configs/sac-her-FetchReach.yaml\" or \"--her --config none\"")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None, help="default: the preset's")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--eval_freq", type=int, default=None, help="default: the preset's")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--max_steps", type=int, default=None,
                   help="default: the preset's (zoo) or ddrl's --total_steps (ddrl)")
    p.add_argument("--torch_threads", type=int, default=1)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    register_envs(args.env)
    steps, eval_freq, target = PRESETS[args.env]
    kwargs = dict(ZOO)
    if args.hyperparams == "ddrl":
        kwargs, ddrl = ddrl_settings(args.env, args.ddrl_flags)
        steps = ddrl.total_steps
        print(f"SB3 SAC with ddrl's hyperparameters: {kwargs}", flush=True)
    steps = args.max_steps or steps
    target = target if args.target_return is None else args.target_return
    os.makedirs(args.out_dir, exist_ok=True)
    env = make_vec_env(args.env, n_envs=1, seed=args.seed, vec_env_cls=DummyVecEnv)
    model = SAC(env=env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    cb = EvalStop(make_eval_env(args.env, args.seed), args.eval_freq or eval_freq,
                  args.eval_episodes, target, os.path.join(args.out_dir, "eval.csv"), t0=T0)
    model.learn(total_timesteps=steps, callback=cb)
    cb.csv.close()
    summary = write_summary(args.out_dir, model, cb, t0=T0)
    summary.update(system=f"sb3-her-{args.hyperparams}", hyperparams=args.hyperparams,
                   env=args.env, seed=args.seed, settings=plain(kwargs))
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
