import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run for recurrent PPO: sb3-contrib RecurrentPPO (an LSTM policy) on CartPole and Pendulum
with the velocities hidden, stopped at a target eval return (the sibling of sb3_ppo.py: the same
evaluation callback, stop rule, time origin and summary.json / eval.csv writer).

    .venv/bin/python benchmarks/sb3_recurrent.py --env cartpole-novel --hyperparams zoo --seed 0 --out_dir /tmp/sb3_lstm
    .venv/bin/python benchmarks/sb3_recurrent.py --env pendulum-novel --hyperparams zoo --seed 0 --out_dir /tmp/sb3_lstm_p
    .venv/bin/python benchmarks/sb3_recurrent.py --env cartpole-novel --hyperparams ddrl --n_envs 8 --lstm_hidden_size 64 --seed 0 --out_dir /tmp/sb3_lstm_d

Envs: ``cartpole-novel`` is CartPole-v1 with observation entries 1 and 3 (cart and pole
velocities) hidden, ``pendulum-novel`` Pendulum-v1 with entry 2 (angular velocity) hidden: what
RL-Zoo registers as CartPoleNoVel-v1 and PendulumNoVel-v1 (rl_zoo3/wrappers.py
MaskVelocityWrapper, rl_zoo3/import_envs.py). This script builds them itself (``HideObs``
below) so that it never depends on whether envs/toys.py has its ``ddrl/...NoVel`` ids yet;
``--hide zero`` multiplies the hidden entries by 0 and keeps the shape (RL-Zoo's wrapper),
``--hide drop`` removes them (default: zero with --hyperparams zoo, drop with ddrl). A gym id
is accepted too: ``ddrl/CartPoleNoVel-v1`` / ``ddrl/PendulumNoVel-v1`` are taken from
envs/toys.py (the file alone: ddrl's env package would import Ray on this process's clock) when
it registers them, else built here; any other id is made as is, ``--hide_obs 1,3`` hiding
entries as ddrl's flag of that name does.

--hyperparams zoo: RL-Zoo's tuned entries, DLR-RM/rl-baselines3-zoo hyperparams/ppo_lstm.yml
at 22e3ff2 (the entries unchanged since de58209, June 2022; an older copy, 038ab16, had neither
normalize nor policy_kwargs). Both: MlpLstmPolicy, normalize: True (VecNormalize of
observations and rewards with the algorithm's gamma, as RL-Zoo's ExpManager does; the
evaluation env's statistics synced from training, its rewards unnormalized), policy_kwargs
dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
net_arch=dict(pi=[64], vf=[64])), n_timesteps 1e5 (the default --max_steps).

- CartPoleNoVel-v1: 8 envs, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs,
  ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2 (RL-Zoo's lin_X: X times SB3's
  progress_remaining, to 0 at n_timesteps: --schedule_steps, 1e5 by default whatever
  --max_steps is, and 0 after it).
- PendulumNoVel-v1: 4 envs, n_steps 1024, gae_lambda 0.95, gamma 0.9, 10 epochs, ent_coef 0.0,
  learning_rate 1e-3, clip_range 0.2, use_sde True, sde_sample_freq 4; no batch_size in the
  entry: RecurrentPPO's default, 128.

--hyperparams ddrl: every setting from a flag (--n_envs ... --ortho_init below), each named
after and defaulting to ddrl's PPO default (configs/ppo-CartPole-v1.yaml: 2 workers x 4 envs,
32 steps, batch 256, 10 epochs, gamma 0.98, lambda 0.8, lr 1e-3 and clip 0.2 linear, 64x64 tanh,
orthogonal init), so that compare.py can give the peer exactly ddrl's settings. Linear schedules
decay to 0 over --schedule_steps (ddrl's --total_steps; default: --max_steps), independently of
where --max_steps stops the run. sb3-contrib's RecurrentPPO has an LSTM only (no GRU).

Evaluation: every --eval_freq env steps, --eval_episodes deterministic episodes on a separate
env (SB3's evaluate_policy, which carries the LSTM states and episode_start through each episode
as RecurrentPPO.predict needs); the run stops at the first mean >= --target_return.

Measured: cartpole-novel, zoo, seed 0, one torch thread: 480.3 at 44,000 env steps, 106 s from
process start (at a 2-core machine's load rising to ~3 near the end: the time is an upper bound).

Writes OUT_DIR/summary.json (ddrl's keys, plus hyperparams, env and the settings used),
OUT_DIR/eval.csv and OUT_DIR/progress.csv (SB3's log), as sb3_ppo.py.
"""
import argparse
import importlib.util
import json
import os
import sys

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize, sync_envs_normalization
from torch import nn

from sb3_ppo import EvalStop, write_summary  # same stop rule, time origin and summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (base gym id, hidden entries, ddrl's id in envs/toys.py, target, eval_freq)
ENVS = {
    "cartpole-novel": ("CartPole-v1", (1, 3), "ddrl/CartPoleNoVel-v1", 475.0, 2_000),
    "pendulum-novel": ("Pendulum-v1", (2,), "ddrl/PendulumNoVel-v1", -200.0, 10_000),
}
ALIASES = {alias: name for name, (_, _, ddrl_id, _, _) in ENVS.items()
           for alias in (ddrl_id, ddrl_id.split("/", 1)[1])}  # ddrl/CartPoleNoVel-v1, CartPoleNoVel-v1

# RL-Zoo's entries (see the docstring): hyperparams/ppo_lstm.yml at 22e3ff2.
ZOO_POLICY_KWARGS = dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
                         enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))
ZOO = {
    "cartpole-novel": dict(
        normalize=True, n_envs=8, n_timesteps=100_000,
        ppo=dict(policy="MlpLstmPolicy", n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                 n_epochs=20, ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2",
                 policy_kwargs=ZOO_POLICY_KWARGS)),
    "pendulum-novel": dict(
        normalize=True, n_envs=4, n_timesteps=100_000,
        ppo=dict(policy="MlpLstmPolicy", n_steps=1024, batch_size=128,  # 128: RecurrentPPO's default
                 gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0, learning_rate=1e-3,
                 clip_range=0.2, use_sde=True, sde_sample_freq=4,
                 policy_kwargs=ZOO_POLICY_KWARGS)),
}
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "elu": nn.ELU}
NORMALIZE = {"none": None, "obs": dict(norm_obs=True, norm_reward=False),
             "reward": dict(norm_obs=False, norm_reward=True),
             "obs_reward": dict(norm_obs=True, norm_reward=True)}
CRITIC_LSTM = {"separate": dict(shared_lstm=False, enable_critic_lstm=True),
               "shared": dict(shared_lstm=True, enable_critic_lstm=False),
               "none": dict(shared_lstm=False, enable_critic_lstm=False)}


class HideObs(gym.ObservationWrapper):
    """Hide entries of a flat Box observation: ``zero`` multiplies them by 0 and keeps the
    space (RL-Zoo's MaskVelocityWrapper), ``drop`` removes them from the observation and the
    space."""

    def __init__(self, env, indices, mode):
        super().__init__(env)
        box = env.observation_space
        self.mode = mode
        if mode == "drop":
            self.keep = np.array([i for i in range(box.shape[0]) if i not in set(indices)])
            self.observation_space = gym.spaces.Box(box.low[self.keep], box.high[self.keep],
                                                    dtype=box.dtype)
        else:
            self.mask = np.ones(box.shape, dtype=box.dtype)
            self.mask[list(indices)] = 0

    def observation(self, observation):
        return observation[self.keep] if self.mode == "drop" else observation * self.mask


def load_toys():
    """Register ddrl's toy ids from envs/toys.py alone (numpy and gymnasium only), as
    sb3_spaces.py does: importing the envs package would import Ray on this process's clock.
    The repository goes on the path for what toys.py imports of ddrl (core.registry: light)."""
    if REPO not in sys.path:
        sys.path.append(REPO)
    spec = importlib.util.spec_from_file_location("ddrl_toys", os.path.join(REPO, "envs", "toys.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def env_maker(env, hide, hide_obs):
    """(a no-argument env constructor, a description of it) for --env."""
    if env.startswith("ddrl/") and env not in gym.registry:
        try:  # ddrl/...NoVel-v1 once envs/toys.py has them; else built below
            load_toys()
        except Exception as e:  # noqa: BLE001  the fallback below builds the env itself
            print(f"sb3_recurrent.py: envs/toys.py not loaded ({e!r}); building {env} here")
    if env in gym.registry and hide_obs is None:
        return (lambda: gym.make(env)), env
    name = ALIASES.get(env, env)
    base, indices = (ENVS[name][0], ENVS[name][1]) if name in ENVS else (env, ())
    indices = indices if hide_obs is None else hide_obs
    if not indices:
        return (lambda: gym.make(base)), base
    return ((lambda: HideObs(gym.make(base), indices, hide)),
            f"{base}, entries {','.join(map(str, indices))} hidden ({hide})")


def linear(start, horizon, max_steps):
    """``start`` decaying linearly to 0 at ``horizon`` env steps, then 0, from SB3's
    progress_remaining (1 - steps / max_steps): RL-Zoo's lin_X when horizon == max_steps,
    ddrl's linear schedule over its --total_steps when horizon is that."""
    def value(progress_remaining):
        steps = (1.0 - progress_remaining) * max_steps
        return start * max(0.0, 1.0 - steps / horizon)
    return value


def zoo_settings(name):
    if name not in ZOO:
        raise SystemExit(f"sb3_recurrent.py: no RL-Zoo entry for {name} here (have {sorted(ZOO)})")
    z = ZOO[name]
    return dict(n_envs=z["n_envs"], n_timesteps=z["n_timesteps"],
                normalize=NORMALIZE["obs_reward"] if z["normalize"] else None,
                ppo=dict(z["ppo"]), hide="zero")


def ddrl_settings(a):
    net = [] if a.net_arch.lower() in ("", "none") else [int(x) for x in a.net_arch.split(",")]
    return dict(
        n_envs=a.n_envs, n_timesteps=None, normalize=NORMALIZE[a.normalize], hide="drop",
        ppo=dict(policy="MlpLstmPolicy", n_steps=a.n_steps, batch_size=a.batch_size,
                 n_epochs=a.n_epochs, gamma=a.gamma, gae_lambda=a.gae_lambda,
                 learning_rate=f"lin_{a.lr}" if a.lr_schedule == "linear" else a.lr,
                 clip_range=f"lin_{a.clip_range}" if a.clip_schedule == "linear" else a.clip_range,
                 ent_coef=a.ent_coef, vf_coef=a.vf_coef,
                 max_grad_norm=a.max_grad_norm if a.max_grad_norm > 0 else float("inf"),  # ddrl: 0 = off
                 use_sde=a.use_sde, sde_sample_freq=a.sde_sample_freq,
                 policy_kwargs=dict(lstm_hidden_size=a.lstm_hidden_size, n_lstm_layers=a.n_lstm_layers,
                                    net_arch=dict(pi=net, vf=list(net)),
                                    activation_fn=ACTIVATIONS[a.activation], ortho_init=a.ortho_init,
                                    log_std_init=a.log_std_init, **CRITIC_LSTM[a.critic_lstm])))


class RecurrentEvalStop(EvalStop):
    """sb3_ppo.py's EvalStop (every eval_freq env steps, n deterministic episodes on a separate
    env, stop at the target), the VecNormalize statistics synced from training first. SB3's
    evaluate_policy carries the LSTM states and episode starts (model.predict's state and
    episode_start) through every episode."""

    def __init__(self, *args, sync=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.sync = sync

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += self.eval_freq
        if self.sync:
            sync_envs_normalization(self.training_env, self.eval_env)
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.n_episodes,
                                  deterministic=True)
        row = (self.num_timesteps, time.time() - self.t0, float(mean))
        self.rows.append(row)
        self.writer.writerow(row)
        self.csv.flush()
        if mean >= self.target:
            self.reached = (row[1], row[0])
            return False
        return True


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="cartpole-novel",
                   help=f"{' | '.join(ENVS)}, or a gym id (default: %(default)s)")
    p.add_argument("--hyperparams", choices=["zoo", "ddrl"], default="zoo",
                   help="zoo: RL-Zoo's ppo_lstm.yml entry; ddrl: the flags below (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None, help="default: 475 / -200 (the env's)")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--eval_freq", type=int, default=None, help="env steps between evaluations "
                   "(default: 2,000 on CartPole, 10,000 on Pendulum, as sb3_ppo.py)")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--max_steps", type=int, default=None,
                   help="env steps at most (default: RL-Zoo's n_timesteps, 1e5; with ddrl "
                        "settings, 200,000)")
    p.add_argument("--schedule_steps", type=int, default=None,
                   help="env steps over which linear schedules decay to 0 (ddrl's --total_steps; "
                        "default: RL-Zoo's n_timesteps with zoo, --max_steps with ddrl)")
    p.add_argument("--torch_threads", type=int, default=1, help="torch threads (default: 1, as sb3_ppo.py)")
    p.add_argument("--hide", choices=["zero", "drop"], default=None,
                   help="how hidden entries are hidden (default: zero with zoo, as RL-Zoo; drop with ddrl)")
    p.add_argument("--hide_obs", type=lambda s: tuple(int(x) for x in s.split(",") if x), default=None,
                   help="observation entries to hide, e.g. 1,3 (default: the env's velocities)")
    d = p.add_argument_group("--hyperparams ddrl (each named after ddrl's flag; defaults: ddrl's PPO defaults)")
    d.add_argument("--n_envs", type=int, default=8, help="envs in all: num_workers x num_envs_per_worker")
    d.add_argument("--n_steps", type=int, default=32, help="ddrl --rollout_steps")
    d.add_argument("--batch_size", type=int, default=256)
    d.add_argument("--n_epochs", type=int, default=10, help="ddrl --num_epochs")
    d.add_argument("--gamma", type=float, default=0.98)
    d.add_argument("--gae_lambda", type=float, default=0.8)
    d.add_argument("--lr", type=float, default=1e-3)
    d.add_argument("--lr_schedule", choices=["constant", "linear"], default="linear")
    d.add_argument("--clip_range", type=float, default=0.2)
    d.add_argument("--clip_schedule", choices=["constant", "linear"], default="linear")
    d.add_argument("--ent_coef", type=float, default=0.0)
    d.add_argument("--vf_coef", type=float, default=0.5)
    d.add_argument("--max_grad_norm", type=float, default=0.5, help="0 = off, as ddrl's")
    d.add_argument("--lstm_hidden_size", type=int, default=64)
    d.add_argument("--n_lstm_layers", type=int, default=1)
    d.add_argument("--critic_lstm", choices=sorted(CRITIC_LSTM), default="separate",
                   help="the critic's LSTM: its own (enable_critic_lstm), the actor's (shared_lstm) "
                        "or none (an MLP critic on the observation) (default: %(default)s)")
    d.add_argument("--net_arch", default="64,64",
                   help="hidden sizes of the actor's and the critic's MLP after the LSTM, or none "
                        "(ddrl --hidden_sizes) (default: %(default)s)")
    d.add_argument("--activation", choices=sorted(ACTIVATIONS), default="tanh")
    d.add_argument("--ortho_init", action=argparse.BooleanOptionalAction, default=True)
    d.add_argument("--normalize", choices=sorted(NORMALIZE), default="none",
                   help="VecNormalize (ddrl --normalize_obs: obs) (default: %(default)s)")
    d.add_argument("--use_sde", action=argparse.BooleanOptionalAction, default=False)
    d.add_argument("--sde_sample_freq", type=int, default=-1)
    d.add_argument("--log_std_init", type=float, default=0.0)
    return p.parse_args(argv)


def build(args):
    """(model, training env, eval env, settings, max_steps, eval_freq, target)."""
    name = ALIASES.get(args.env, args.env)
    s = zoo_settings(name) if args.hyperparams == "zoo" else ddrl_settings(args)
    hide = args.hide or s["hide"]
    make, env_desc = env_maker(args.env, hide, args.hide_obs)
    max_steps = args.max_steps or s["n_timesteps"] or 200_000
    horizon = args.schedule_steps or s["n_timesteps"] or max_steps
    ppo = dict(s["ppo"])
    for key in ("learning_rate", "clip_range"):  # RL-Zoo's "lin_X" strings
        if isinstance(ppo[key], str) and ppo[key].startswith("lin_"):
            ppo[key] = linear(float(ppo[key][4:]), horizon, max_steps)
    env = make_vec_env(make, n_envs=s["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)
    eval_env = DummyVecEnv([lambda: Monitor(make())])
    if s["normalize"]:
        env = VecNormalize(env, gamma=ppo["gamma"], **s["normalize"])
        eval_env = VecNormalize(eval_env, training=False, norm_obs=s["normalize"]["norm_obs"],
                                norm_reward=False, gamma=ppo["gamma"])
    eval_env.seed(args.seed + 10_000)
    model = RecurrentPPO(env=env, seed=args.seed, device="cpu", verbose=0, **ppo)
    target = ENVS[name][3] if name in ENVS else None
    target = target if args.target_return is None else args.target_return
    if target is None:
        raise SystemExit("sb3_recurrent.py: --target_return is needed for this env")
    eval_freq = args.eval_freq or (ENVS[name][4] if name in ENVS else 2_000)
    settings = dict(env=env_desc, n_envs=s["n_envs"], normalize=s["normalize"], max_steps=max_steps,
                    schedule_steps=horizon, **{k: v for k, v in s["ppo"].items()})
    return model, env, eval_env, settings, max_steps, eval_freq, target


def plain(o):
    """``o`` as JSON values: classes and schedules by name, inf (no clipping) as None."""
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if isinstance(o, float) and not np.isfinite(o):
        return None
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    return getattr(o, "__name__", str(o))


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    os.makedirs(args.out_dir, exist_ok=True)
    model, env, eval_env, settings, max_steps, eval_freq, target = build(args)
    model.set_logger(configure(args.out_dir, ["csv"]))  # progress.csv, one row per rollout
    cb = RecurrentEvalStop(eval_env, eval_freq, args.eval_episodes, target,
                           os.path.join(args.out_dir, "eval.csv"), t0=T0,
                           sync=isinstance(env, VecNormalize))
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    summary = write_summary(args.out_dir, model, cb, t0=T0)
    summary.update(system=f"sb3-recurrent-{args.hyperparams}", hyperparams=args.hyperparams,
                   env=args.env, seed=args.seed,
                   settings=plain(settings))
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
