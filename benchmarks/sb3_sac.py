import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run: Stable-Baselines3 SAC (or sb3-contrib CrossQ, --algo crossq; sb3-contrib TQC, --algo tqc;
SB3's TD3, --algo td3),
stopped at a target eval return (the SAC sibling of sb3_ppo.py).

    .venv/bin/python benchmarks/sb3_sac.py --env Pendulum-v1 --seed 0 --target_return -200 --out_dir /tmp/sb3sac
    .venv/bin/python benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --seed 0 --target_return 200 --out_dir /tmp/sb3sac_ll

--hyperparams zoo (default): Pendulum-v1 uses SB3's default SAC settings, LunarLanderContinuous-v3
the RL-Zoo entry. --hyperparams ddrl: exactly the hyperparameters ddrl's main.py would train with
for ``--model_name sac --gym_id ENV`` plus --ddrl_flags (its preset configs/sac-ENV.yaml and its
defaults), translated to SB3's SAC arguments by ``ddrl_hyperparameters``; a ddrl setting SB3 cannot
express is an error, not a silent difference.

    .venv/bin/python benchmarks/sb3_sac.py --env LunarLanderContinuous-v3 --hyperparams ddrl --seed 0 --out_dir /tmp/sb3eq

--algo crossq: sb3-contrib's CrossQ; zoo = RL-Zoo's crossq.yml entries, ddrl = ddrl's
``--model_name crossq`` settings (its critic and actor sizes, policy delay, batch renorm momentum,
eps and warm-up, Adam beta1; sb3-contrib's own beta1 is 0.5 as well).

    .venv/bin/python benchmarks/sb3_sac.py --algo crossq --env LunarLanderContinuous-v3 --hyperparams ddrl --seed 0 --out_dir /tmp/sb3cq

--algo tqc: sb3-contrib's TQC; zoo = its defaults on Pendulum-v1 (SB3's SAC defaults with 25
quantiles, 2 critics, 2 atoms dropped per critic) and RL-Zoo's tqc.yml entry on
LunarLanderContinuous (the SAC entry's settings); ddrl = ddrl's ``--model_name tqc`` settings
(SAC's mapping plus its quantiles, critics and atoms dropped).

    .venv/bin/python benchmarks/sb3_sac.py --algo tqc --env Pendulum-v1 --hyperparams ddrl --seed 0 --out_dir /tmp/sb3tqc

--algo td3: SB3's TD3; zoo = RL-Zoo's td3.yml entry, ddrl = ddrl's ``--model_name td3`` settings
(its preset configs/td3-Pendulum-v1.yaml on Pendulum): network sizes, one learning rate, batch,
warm-up, tau, gamma, policy delay, target smoothing noise and clip, and Gaussian exploration noise
(NormalActionNoise of --exploration_noise; SB3 adds it to the action scaled to [-1, 1] and clips,
as ddrl does).

    .venv/bin/python benchmarks/sb3_sac.py --algo td3 --env Pendulum-v1 --hyperparams ddrl --seed 0 --out_dir /tmp/sb3td3

Writes OUT_DIR/summary.json (same keys as ddrl's) and OUT_DIR/eval.csv (one row per evaluation).
"""
import argparse
import os
import shlex
import sys

import torch
from stable_baselines3 import SAC
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_ppo import EvalStop, lin, make_eval_env, write_summary  # same eval, stop rule and summary

# n_envs is 1 in both (SB3's default for off-policy). eval_freq/target are ours.
PRESETS = {
    # SB3's SAC defaults, unchanged: lr 3e-4, buffer 1e6, learning_starts 100, batch 256, tau 0.005,
    # gamma 0.99, train_freq 1, gradient_steps 1, ent_coef "auto", net_arch [256, 256].
    # n_timesteps is RL-Zoo's for Pendulum-v1 (its sac.yml entry also sets learning_rate 1e-3; not used here).
    "Pendulum-v1": dict(
        n_timesteps=20_000, eval_freq=1_000, target_return=-200.0,
        sac=dict(policy="MlpPolicy")),
    # DLR-RM/rl-baselines3-zoo hyperparams/sac.yml, entry "LunarLanderContinuous-v3" (formerly -v2).
    "LunarLanderContinuous-v3": dict(
        n_timesteps=500_000, eval_freq=10_000, target_return=200.0,
        sac=dict(policy="MlpPolicy", batch_size=256, learning_rate=lin(7.3e-4), buffer_size=1_000_000,
                 ent_coef="auto", gamma=0.99, tau=0.01, train_freq=1, gradient_steps=1,
                 learning_starts=10_000, policy_kwargs=dict(net_arch=[400, 300]))),
    # RL-Zoo's MuJoCo entry (HalfCheetah/Hopper/Walker2d/Ant in sac.yml): SB3's defaults with a
    # 10k-step warm-up, 1M steps; ddrl's configs/sac-mujoco.yaml holds the same. Evaluation as
    # that preset: 5 episodes every 10k steps; no target (runs go the whole budget).
    "HalfCheetah-v5": dict(
        n_timesteps=1_000_000, eval_freq=10_000, eval_episodes=5, target_return=float("inf"),
        sac=dict(policy="MlpPolicy", learning_starts=10_000)),
}
# DLR-RM/rl-baselines3-zoo hyperparams/crossq.yml (sb3-contrib's CrossQ defaults otherwise: lr 1e-3,
# batch 256, policy_delay 3, net_arch pi [256, 256] / qf [1024, 1024], Adam betas (0.5, 0.999)).
CROSSQ_PRESETS = {
    "Pendulum-v1": dict(n_timesteps=20_000, eval_freq=1_000, target_return=-200.0,
                        sac=dict(policy="MlpPolicy", policy_delay=2,
                                 policy_kwargs=dict(net_arch=[256, 256]))),
    "LunarLanderContinuous-v3": dict(n_timesteps=200_000, eval_freq=10_000, target_return=200.0,
                                     sac=dict(policy="MlpPolicy", buffer_size=1_000_000,
                                              learning_starts=10_000)),
}

# sb3-contrib's TQC defaults (SB3's SAC defaults, n_quantiles 25, n_critics 2,
# top_quantiles_to_drop_per_net 2) on Pendulum-v1 (RL-Zoo's tqc.yml has only a gSDE entry there);
# on LunarLanderContinuous-v3 RL-Zoo's tqc.yml entry, the same settings as its sac.yml entry.
TQC_PRESETS = {
    "Pendulum-v1": dict(n_timesteps=20_000, eval_freq=1_000, target_return=-200.0,
                        sac=dict(policy="MlpPolicy")),
    "LunarLanderContinuous-v3": PRESETS["LunarLanderContinuous-v3"],
}

# DLR-RM/rl-baselines3-zoo hyperparams/td3.yml (SB3's TD3 defaults otherwise: lr 1e-3, batch 256,
# tau 0.005, policy_delay 2, target_policy_noise 0.2, target_noise_clip 0.5).
TD3_PRESETS = {
    "Pendulum-v1": dict(n_timesteps=20_000, eval_freq=1_000, target_return=-200.0,
                        sac=dict(policy="MlpPolicy", gamma=0.98, buffer_size=200_000,
                                 learning_starts=10_000, gradient_steps=1, train_freq=1,
                                 learning_rate=1e-3, action_noise=("normal", 0.1),
                                 policy_kwargs=dict(net_arch=[400, 300]))),
}


def td3_hyperparameters(a, refuse):
    """SB3 TD3 keyword arguments equal to ddrl's ``--model_name td3`` settings ``a``."""
    if a.actor_lr != a.critic_lr:
        refuse(f"ddrl's actor_lr {a.actor_lr} and critic_lr {a.critic_lr} differ")
    if a.td3_precision != "fp32":
        print(f"sb3_sac.py: ddrl computes its update in {a.td3_precision}; SB3 computes the same "
              f"update in fp32 (it has no other setting).", flush=True)
    lr = lin(a.actor_lr) if a.td3_lr_schedule == "linear" else float(a.actor_lr)
    return dict(policy="MlpPolicy", learning_rate=lr, buffer_size=a.buffer_size,
                learning_starts=a.learning_starts, batch_size=a.batch_size, tau=a.tau,
                gamma=a.td3_gamma, policy_delay=a.policy_delay,
                target_policy_noise=a.target_policy_noise, target_noise_clip=a.target_noise_clip,
                action_noise=("normal", a.exploration_noise),
                policy_kwargs=dict(net_arch=list(a.td3_hidden_sizes)))


def action_noise_of(spec, env):
    """("normal", sigma) as SB3's NormalActionNoise over the env's action dimensions."""
    import numpy as np
    from stable_baselines3.common.noise import NormalActionNoise
    kind, sigma = spec
    assert kind == "normal", kind
    dim = int(np.prod(env.action_space.shape))
    return NormalActionNoise(mean=np.zeros(dim), sigma=sigma * np.ones(dim))


def ddrl_hyperparameters(env_id, ddrl_flags="", algo="sac"):
    """SB3 SAC keyword arguments equal to ddrl's SAC settings for ``env_id`` (what
    ``main.py --env_name gym_env --model_name sac --gym_id ENV <ddrl_flags>`` resolves to: flags,
    then the automatic preset, then defaults), with the ddrl args they came from.

    The mapping: sac_hidden_sizes -> net_arch (actor and both critics); one learning rate
    (actor_lr = critic_lr = alpha_lr required: SB3 has one optimizer setting), constant or
    decaying linearly (--sac_lr_schedule linear -> RL-Zoo's lin_); batch_size, buffer_size, tau,
    sac_gamma -> gamma; learning_starts = start_steps (SB3 acts uniformly at random until it
    learns) -> learning_starts; utd_ratio >= 1 ->
    gradient_steps per env step, below 1 -> one gradient step every 1/utd_ratio env steps;
    init_alpha and target_entropy -> ent_coef "auto_<init>" and target_entropy. Not expressible,
    so refused: prioritized replay, observation normalization. ddrl's --sac_precision bf16 is how
    it computes the same update (SB3 computes it in fp32), so it is compared, not refused. ddrl's
    weight_sync_interval and update lag have no SB3 counterpart (SB3 acts with the newest
    weights): they are part of what is compared."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from options.options import parse_args
    a = parse_args(["--env_name", "gym_env", "--model_name", algo, "--gym_id", env_id]
                   + shlex.split(ddrl_flags))

    def refuse(why):
        raise SystemExit(f"sb3_sac.py --hyperparams ddrl: {why}; SB3 has no equal setting, "
                         f"so the comparison would not be on equal terms.")

    if a.learning_starts != a.start_steps:
        refuse(f"ddrl's learning_starts {a.learning_starts} and start_steps {a.start_steps} differ")
    if a.prioritized_replay:
        refuse("ddrl uses --prioritized_replay")
    if getattr(a, "normalize_obs", False):
        refuse("ddrl normalizes observations")
    if a.utd_ratio >= 1:
        if a.utd_ratio != int(a.utd_ratio):
            refuse(f"utd_ratio {a.utd_ratio} is not a whole number of updates per step")
        train_freq, gradient_steps = 1, int(a.utd_ratio)
    else:
        train_freq, gradient_steps = round(1 / a.utd_ratio), 1
    if algo == "td3":
        return dict(td3_hyperparameters(a, refuse), train_freq=train_freq,
                    gradient_steps=gradient_steps), a
    lrs = {a.actor_lr, a.critic_lr, a.alpha_lr}
    if len(lrs) != 1:
        refuse(f"ddrl's actor_lr {a.actor_lr}, critic_lr {a.critic_lr} and alpha_lr {a.alpha_lr} differ")
    if getattr(a, "sac_precision", "fp32") != "fp32":
        # How ddrl computes its update, not what it computes: SB3 runs the same update in fp32,
        # and whether bf16 learns as well is part of what the comparison measures.
        print(f"sb3_sac.py: ddrl computes its update in {a.sac_precision}; SB3 computes the same "
              f"update in fp32 (it has no other setting).", flush=True)
    entropy = "auto" if a.target_entropy == "auto" else float(a.target_entropy)
    lr = float(lrs.pop())
    if getattr(a, "sac_lr_schedule", "constant") == "linear":
        lr = lin(lr)  # to 0 at learn()'s total_timesteps: main() makes that ddrl's total_steps
    kwargs = dict(policy="MlpPolicy", learning_rate=lr, buffer_size=a.buffer_size,
                  learning_starts=a.learning_starts, batch_size=a.batch_size, tau=a.tau,
                  gamma=a.sac_gamma, train_freq=train_freq, gradient_steps=gradient_steps,
                  ent_coef=f"auto_{a.init_alpha}", target_entropy=entropy,
                  policy_kwargs=dict(net_arch=list(a.sac_hidden_sizes)))
    if algo == "crossq":  # no target critics: tau has no meaning; the CrossQ-specific settings
        del kwargs["tau"]
        kwargs.update(policy_delay=a.policy_delay, policy_kwargs=dict(
            net_arch=dict(pi=list(a.sac_hidden_sizes), qf=list(a.crossq_critic_sizes)),
            batch_norm_momentum=a.bn_momentum, batch_norm_eps=a.bn_eps,
            renorm_warmup_steps=a.renorm_warmup_steps,
            optimizer_kwargs=dict(betas=(a.adam_beta1, 0.999))))
    if algo == "tqc":
        kwargs.update(top_quantiles_to_drop_per_net=a.top_quantiles_to_drop)
        kwargs["policy_kwargs"].update(n_quantiles=a.n_quantiles, n_critics=a.n_critics)
    return kwargs, a


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Pendulum-v1", choices=sorted(PRESETS))
    p.add_argument("--algo", choices=["sac", "crossq", "tqc", "td3"], default="sac",
                   help="sac: SB3's SAC; crossq: sb3-contrib's CrossQ; tqc: sb3-contrib's TQC; "
                        "td3: SB3's TD3")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None, help="default: the preset's")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--eval_freq", type=int, default=None,
                   help="env steps between evaluations; default: the preset's (1000 Pendulum, 10000 LunarLander)")
    p.add_argument("--eval_episodes", type=int, default=None, help="default: the preset's, else 10")
    p.add_argument("--hyperparams", choices=["zoo", "ddrl"], default="zoo",
                   help="zoo: the PRESETS below (SB3 defaults / RL-Zoo); ddrl: ddrl's own settings "
                        "for this env (ddrl_hyperparameters)")
    p.add_argument("--ddrl_flags", default="",
                   help="with --hyperparams ddrl: ddrl flags the compared ddrl run has beyond its "
                        "preset (e.g. \"--sac_hidden_sizes 400,300\")")
    p.add_argument("--max_steps", type=int, default=None,
                   help="default: RL-Zoo n_timesteps (2e4 Pendulum, 5e5 LunarLander). "
                        "LunarLander's lin_ learning rate decays over max_steps.")
    p.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads (default: 1; the figures behind the suites' 1 or 2 are in "
                        "benchmarks/README.md and BENCHMARKS.md)")
    args = p.parse_args()

    torch.set_num_threads(args.torch_threads)
    preset = {"crossq": CROSSQ_PRESETS, "tqc": TQC_PRESETS,
              "td3": TD3_PRESETS}.get(args.algo, PRESETS)[args.env]
    target = preset["target_return"] if args.target_return is None else args.target_return
    eval_freq = args.eval_freq or preset["eval_freq"]
    max_steps = args.max_steps or preset["n_timesteps"]
    sac_kwargs = preset["sac"]
    if args.hyperparams == "ddrl":
        sac_kwargs, ddrl_args = ddrl_hyperparameters(args.env, args.ddrl_flags, args.algo)
        max_steps = args.max_steps or ddrl_args.total_steps
        schedule = getattr(ddrl_args, "sac_lr_schedule", None) or ddrl_args.td3_lr_schedule
        if schedule == "linear" and max_steps != ddrl_args.total_steps:
            raise SystemExit(f"sb3_sac.py: ddrl's learning rates decay to 0 at its --total_steps "
                             f"{ddrl_args.total_steps}; --max_steps {max_steps} would decay SB3's "
                             f"at another pace. Give both the same budget.")
        print(f"SB3 {args.algo} with ddrl's hyperparameters: {sac_kwargs}", flush=True)
    os.makedirs(args.out_dir, exist_ok=True)

    # What SAC(env="<id>") builds itself (Monitor + DummyVecEnv, one env), seeded explicitly.
    env = make_vec_env(args.env, n_envs=1, seed=args.seed, vec_env_cls=DummyVecEnv)
    eval_env = make_eval_env(args.env, args.seed)
    if args.algo == "crossq":
        from sb3_contrib import CrossQ as algo_cls
    elif args.algo == "tqc":
        from sb3_contrib import TQC as algo_cls
    elif args.algo == "td3":
        from stable_baselines3 import TD3 as algo_cls
        sac_kwargs = dict(sac_kwargs, action_noise=action_noise_of(sac_kwargs["action_noise"], env))
    else:
        algo_cls = SAC
    model = algo_cls(env=env, seed=args.seed, device="cpu", verbose=0, **sac_kwargs)
    episodes = args.eval_episodes or preset.get("eval_episodes", 10)
    cb = EvalStop(eval_env, eval_freq, episodes, target, os.path.join(args.out_dir, "eval.csv"), t0=T0)
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    write_summary(args.out_dir, model, cb, t0=T0)


if __name__ == "__main__":
    main()
