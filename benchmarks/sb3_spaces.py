import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run for structured spaces and action masks (issue 30): SB3 PPO on MiniGrid's Dict
observation, sb3-contrib MaskablePPO on ddrl's masked toy env, stopped at a target eval return
(the sibling of sb3_ppo.py: the same evaluation callback, stop rule, time origin and
summary.json / eval.csv writer).

    .venv/bin/python benchmarks/sb3_spaces.py --env MiniGrid-DoorKey-5x5-v0 --seed 0 --out_dir /tmp/sb3_mg
    .venv/bin/python benchmarks/sb3_spaces.py --env MiniGrid-DoorKey-5x5-v0 --hyperparams zoo --seed 0 --out_dir /tmp/sb3_mg_zoo
    .venv/bin/python benchmarks/sb3_spaces.py --env ddrl/MaskedChoice-v0 --seed 0 --out_dir /tmp/sb3_mask
    .venv/bin/python benchmarks/sb3_spaces.py --env MiniGrid-DoorKey-5x5-v0 --verify_ddrl   # the table against ddrl's own

--hyperparams ddrl (default): the settings ddrl's main.py resolves for the same id (its preset
and defaults: PRESETS below, written out so that this process does not import ddrl and pay for
it on its clock; --verify_ddrl parses ddrl's flags and checks every value against the table):

- MiniGrid-DoorKey-5x5-v0, configs/ppo-minigrid.yaml: the Text mission dropped (gymnasium's
  FilterObservation keeps direction and image), MultiInputPolicy with ``FlatLeaves``, a features
  extractor that does what ddrl's encoder does: the 7x7x3 uint8 symbolic image flattened as raw
  floats (normalize_images False: no /255) beside the one-hot direction (SB3's own preprocessing
  of a Discrete leaf), 151 features; SB3's CombinedExtractor would give the image to a NatureCNN,
  which cannot take 7x7. net_arch pi [64, 64] and vf [64, 64], tanh, SB3's orthogonal init;
  16 envs (DummyVecEnv) x 64 steps, batch 256, 4 epochs, gamma 0.99, lambda 0.95, learning rate
  1e-3 and clip 0.2 both decaying linearly to 0 over --max_steps (200k, ddrl's --total_steps),
  entropy 0.01; 10 deterministic episodes every 10k steps, target 0.9. (SB3 transposes the image
  to channels first, VecTransposeImage, before flattening it: a permutation of the same inputs.)
- ddrl/MaskedChoice-v0 (envs/toys.py; this script loads that file alone, without ddrl's env
  package and its Ray import): sb3-contrib MaskablePPO with MlpPolicy on the Box part of the
  observation: the mask is stripped from what the policy sees (as ddrl's encoder leaves it out)
  and handed to MaskablePPO through ``action_masks()`` (sb3_contrib's ActionMasker); masks are
  applied in acting, in the loss and in evaluation (sb3_contrib's evaluate_policy,
  use_masking). ddrl's defaults in one process with 8 envs (``--num_workers 0
  --num_envs_per_worker 8 --total_steps 100000``): 8 envs x 32 steps, batch 256, 10 epochs,
  gamma 0.98, lambda 0.8, learning rate 1e-3 and clip 0.2 linear to 0 over 100k steps, no
  entropy bonus, 64x64 tanh; 10 deterministic episodes every 2,000 steps, target 18.
  Invalid actions are counted from the env's own counter (``info["invalid_actions"]``, summed
  over every episode of every env) in training and in evaluation, and separately as actions
  outside the mask of the observation they answer; summary.json holds both.

--hyperparams zoo (MiniGrid only): RL-Zoo's own entry (DLR-RM/rl-baselines3-zoo
hyperparams/ppo.yml at 22e3ff2, MiniGrid-DoorKey-5x5-v0 <- minigrid-defaults):
minigrid.wrappers.FlatObsWrapper, normalize: true (VecNormalize of observations and rewards,
gamma 0.99; the evaluation env's statistics synced from training, rewards unnormalized), 8
envs, MlpPolicy, n_steps 128, batch 64, 10 epochs, gamma 0.99, lambda 0.95, ent 0.0, lr 2.5e-4,
clip 0.2, n_timesteps 1e5 (--max_steps; nothing decays, so a longer budget changes nothing
before 1e5).

Writes OUT_DIR/summary.json (ddrl's keys, plus the invalid-action counts on a masked env),
OUT_DIR/eval.csv and OUT_DIR/progress.csv (SB3's log), as sb3_ppo.py.
"""
import argparse
import importlib.util
import json
import os
import shlex
import sys

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize, sync_envs_normalization
from torch import nn

from sb3_ppo import EvalStop, lin, write_summary  # same stop rule, time origin and summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIGRID = "MiniGrid-DoorKey-5x5-v0"
MASKED = "ddrl/MaskedChoice-v0"


class FlatLeaves(BaseFeaturesExtractor):
    """Every leaf of a Dict observation flattened and concatenated, after SB3's own
    preprocessing (Discrete one-hot; Box as floats, unscaled with normalize_images False): what
    ddrl's MultiInputEncoder does with ``--encoder_for image=flatten`` and a Discrete leaf."""

    def __init__(self, observation_space):
        super().__init__(observation_space, sum(get_flattened_obs_dim(space) for space in
                                                observation_space.spaces.values()))
        self.keys = list(observation_space.spaces)

    def forward(self, observations):
        return torch.cat([observations[key].flatten(1) for key in self.keys], dim=1)


# The ddrl settings, written out (--verify_ddrl checks them against ddrl's parser): the ddrl
# flag each value comes from is its key. lr and clip schedules decay to 0 over total_steps.
DDRL = {
    MINIGRID: dict(ddrl_flags="", num_envs=16, rollout_steps=64, batch_size=256, num_epochs=4,
                   gamma=0.99, gae_lambda=0.95, lr=1e-3, lr_schedule="linear", clip_range=0.2,
                   clip_schedule="linear", ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
                   hidden_sizes=[64, 64], activation="tanh", total_steps=200_000,
                   eval_interval=10_000, target_return=0.9, drop_keys=("mission",),
                   encoder_for={"image": "flatten"}),
    MASKED: dict(ddrl_flags="--num_workers 0 --num_envs_per_worker 8 --total_steps 100000",
                 num_envs=8, rollout_steps=32, batch_size=256, num_epochs=10, gamma=0.98,
                 gae_lambda=0.8, lr=1e-3, lr_schedule="linear", clip_range=0.2,
                 clip_schedule="linear", ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
                 hidden_sizes=[64, 64], activation="tanh", total_steps=100_000,
                 eval_interval=2_000, target_return=18.0, drop_keys=(), encoder_for={}),
}
# RL-Zoo's entry (see the docstring); n_timesteps is its own budget.
ZOO = {
    MINIGRID: dict(n_envs=8, n_timesteps=100_000, eval_freq=10_000, target_return=0.9,
                   ppo=dict(policy="MlpPolicy", n_steps=128, batch_size=64, gae_lambda=0.95,
                            gamma=0.99, n_epochs=10, ent_coef=0.0, learning_rate=2.5e-4,
                            clip_range=0.2)),
}
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def ppo_kwargs(d, policy):
    """SB3 PPO keyword arguments for ddrl's settings ``d``."""
    return dict(
        policy=policy, n_steps=d["rollout_steps"], batch_size=d["batch_size"],
        n_epochs=d["num_epochs"], gamma=d["gamma"], gae_lambda=d["gae_lambda"],
        learning_rate=lin(d["lr"]) if d["lr_schedule"] == "linear" else d["lr"],
        clip_range=lin(d["clip_range"]) if d["clip_schedule"] == "linear" else d["clip_range"],
        ent_coef=d["ent_coef"], vf_coef=d["vf_coef"], max_grad_norm=d["max_grad_norm"],
        policy_kwargs=dict(net_arch=dict(pi=list(d["hidden_sizes"]), vf=list(d["hidden_sizes"])),
                           activation_fn=ACTIVATIONS[d["activation"]]))


def verify_ddrl(env_id):
    """Parse ddrl's flags for ``env_id`` (its preset, defaults and DDRL[env_id]'s ddrl_flags) and
    compare every value of the table; exits non-zero on a difference."""
    sys.path.insert(0, REPO)
    from options.options import parse_args
    d = DDRL[env_id]
    a = parse_args(["--env_name", "gym_env", "--model_name", "ppo", "--gym_id", env_id]
                   + shlex.split(d["ddrl_flags"]))
    resolved = dict(num_envs=a.num_envs_per_worker * max(1, a.num_workers),
                    hidden_sizes=list(a.hidden_sizes) if a.hidden_sizes is not None else [64, 64],
                    drop_keys=tuple(a.drop_keys), encoder_for=dict(
                        item.split("=", 1) for item in (a.encoder_for or ())),
                    # 'auto': the id's reward_threshold (gym_env's default --target_return)
                    target_return=float(gym.spec(env_id).reward_threshold
                                        if a.target_return == "auto" else a.target_return))
    for key in d:
        if key in ("ddrl_flags",) or key in resolved:
            continue
        resolved[key] = getattr(a, key)
    unequal = {k: (d[k], resolved[k]) for k in d if k != "ddrl_flags" and d[k] != resolved[k]}
    for key in ("normalize_obs", "clip_range_vf", "use_sde"):
        if getattr(a, key, None):
            unequal[key] = ("off here", getattr(a, key))
    if (a.eval_episodes, a.eval_deterministic) != (10, True):  # this script's evaluation
        unequal["evaluation"] = ("10 deterministic episodes", (a.eval_episodes,
                                                               a.eval_deterministic))
    print(json.dumps(dict(env=env_id, ddrl_flags=d["ddrl_flags"], table=d,
                          unequal={k: list(map(str, v)) for k, v in unequal.items()}),
                     default=str, indent=1))
    if unequal:
        raise SystemExit(f"sb3_spaces.py: the table differs from ddrl's settings: {unequal}")
    print("sb3_spaces.py: every value equals ddrl's")


# -- the masked env ------------------------------------------------------------------------
def load_toys():
    """Register ddrl's toy ids from envs/toys.py alone (numpy and gymnasium only): importing
    the envs package would import Ray on this process's clock."""
    if MASKED in gym.registry:
        return
    if REPO not in sys.path:  # toys.py raises core.registry's ConfigError (no Ray import)
        sys.path.insert(0, REPO)
    spec = importlib.util.spec_from_file_location("ddrl_toys", os.path.join(REPO, "envs", "toys.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


class InvalidCount(gym.Wrapper):
    """Counts the env's invalid actions (the increments of ``info["invalid_actions"]``, the
    episode's running count) and, independently, the actions outside the mask of the
    observation they answer. Every instance is listed in ``COUNTERS[role]``."""
    COUNTERS = {"training": [], "evaluation": []}

    def __init__(self, env, role):
        super().__init__(env)
        self.invalid = self.outside_mask = self.steps = self.episodes = 0
        self.last_count, self.mask = 0, None
        InvalidCount.COUNTERS[role].append(self)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.last_count, self.mask = info.get("invalid_actions", 0), obs["action_mask"]
        return obs, info

    def step(self, action):
        if not self.mask[int(action)]:
            self.outside_mask += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        count = info.get("invalid_actions", 0)
        self.invalid += count - self.last_count
        self.last_count, self.mask = count, obs["action_mask"]
        self.steps += 1
        self.episodes += int(terminated or truncated)
        return obs, reward, terminated, truncated, info

    @classmethod
    def totals(cls, role):
        counters = cls.COUNTERS[role]
        return {f"{role}_{k}": int(sum(getattr(c, k) for c in counters))
                for k in ("invalid", "outside_mask", "steps", "episodes")}


class StripMask(gym.ObservationWrapper):
    """The observation's Box part for the policy; the mask kept for ``action_masks()``."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = env.observation_space["observation"]
        self.mask = None

    def observation(self, observation):
        self.mask = observation["action_mask"].astype(bool)
        return observation["observation"]


def masked_wrapper(role):
    from sb3_contrib.common.wrappers import ActionMasker

    def wrap(env):
        return ActionMasker(StripMask(InvalidCount(env, role)), lambda e: e.mask)
    return wrap


class SpacesEvalStop(EvalStop):
    """sb3_ppo.py's EvalStop (every eval_freq env steps, n deterministic episodes on separate
    envs, stop at the target) with the evaluation of this run: masks through sb3_contrib's
    evaluate_policy, VecNormalize statistics synced from the training env first."""

    def __init__(self, *args, masked=False, sync=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.masked, self.sync = masked, sync

    def _on_step(self):
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += self.eval_freq
        if self.sync:
            sync_envs_normalization(self.training_env, self.eval_env)
        if self.masked:
            from sb3_contrib.common.maskable.evaluation import evaluate_policy
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.n_episodes,
                                      deterministic=True, use_masking=True)
        else:
            from stable_baselines3.common.evaluation import evaluate_policy
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


def build(args):
    """(model, training env, eval env, eval_freq, target, max_steps, masked, sync)."""
    if args.env == MINIGRID:
        import minigrid
        gym.register_envs(minigrid)
    else:
        load_toys()
    if args.hyperparams == "zoo":
        if args.env not in ZOO:
            raise SystemExit(f"sb3_spaces.py: no RL-Zoo entry for {args.env} here")
        from minigrid.wrappers import FlatObsWrapper
        z = ZOO[args.env]
        env = VecNormalize(make_vec_env(args.env, n_envs=z["n_envs"], seed=args.seed,
                                        wrapper_class=FlatObsWrapper, vec_env_cls=DummyVecEnv),
                           gamma=z["ppo"]["gamma"])
        eval_env = VecNormalize(DummyVecEnv([lambda: Monitor(FlatObsWrapper(gym.make(args.env)))]),
                                training=False, norm_reward=False, gamma=z["ppo"]["gamma"])
        eval_env.seed(args.seed + 10_000)
        model = PPO(env=env, seed=args.seed, device="cpu", verbose=0, **z["ppo"])
        return (model, env, eval_env, z["eval_freq"], z["target_return"],
                args.max_steps or z["n_timesteps"], False, True)
    d = DDRL[args.env]
    if args.env == MINIGRID:
        from gymnasium.wrappers import FilterObservation

        def wrap(env):
            return FilterObservation(env, [k for k in env.observation_space.spaces
                                           if k not in d["drop_keys"]])
        kwargs = ppo_kwargs(d, "MultiInputPolicy")
        kwargs["policy_kwargs"].update(features_extractor_class=FlatLeaves, normalize_images=False)
        algo, masked = PPO, False
        eval_wrap = wrap
    else:
        from sb3_contrib import MaskablePPO
        wrap, eval_wrap = masked_wrapper("training"), masked_wrapper("evaluation")
        kwargs, algo, masked = ppo_kwargs(d, "MlpPolicy"), MaskablePPO, True
    env = make_vec_env(args.env, n_envs=d["num_envs"], seed=args.seed, wrapper_class=wrap,
                       vec_env_cls=DummyVecEnv)
    eval_env = eval_wrap(Monitor(gym.make(args.env)))
    eval_env.reset(seed=args.seed + 10_000)
    max_steps = args.max_steps or d["total_steps"]
    if max_steps != d["total_steps"] and "linear" in (d["lr_schedule"], d["clip_schedule"]):
        raise SystemExit(f"sb3_spaces.py: ddrl's schedules decay to 0 at its --total_steps "
                         f"{d['total_steps']}; --max_steps {max_steps} would decay SB3's at "
                         f"another pace. Give both the same budget.")
    model = algo(env=env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    return model, env, eval_env, d["eval_interval"], d["target_return"], max_steps, masked, False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default=MINIGRID, choices=[MINIGRID, MASKED])
    p.add_argument("--hyperparams", choices=["ddrl", "zoo"], default="ddrl",
                   help="ddrl: ddrl's settings for this id (the DDRL table); zoo: RL-Zoo's entry")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None, help="default: the table's")
    p.add_argument("--out_dir", default=None)
    p.add_argument("--eval_freq", type=int, default=None, help="default: the table's")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--max_steps", type=int, default=None,
                   help="default: ddrl's --total_steps (RL-Zoo's n_timesteps with --hyperparams zoo)")
    p.add_argument("--torch_threads", type=int, default=1, help="torch threads (default: 1, as sb3_ppo.py)")
    p.add_argument("--verify_ddrl", action="store_true",
                   help="check the DDRL table against ddrl's parsed flags and exit")
    args = p.parse_args()
    if args.verify_ddrl:
        return verify_ddrl(args.env)
    if not args.out_dir:
        p.error("--out_dir is required")

    torch.set_num_threads(args.torch_threads)
    os.makedirs(args.out_dir, exist_ok=True)
    model, env, eval_env, eval_freq, target, max_steps, masked, sync = build(args)
    target = target if args.target_return is None else args.target_return
    model.set_logger(configure(args.out_dir, ["csv"]))  # progress.csv, one row per rollout
    cb = SpacesEvalStop(eval_env, args.eval_freq or eval_freq, args.eval_episodes, target,
                        os.path.join(args.out_dir, "eval.csv"), t0=T0, masked=masked, sync=sync)
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    summary = write_summary(args.out_dir, model, cb, t0=T0)
    if masked:  # the counts, after the clock: they are not part of the run
        summary.update(InvalidCount.totals("training"), **InvalidCount.totals("evaluation"))
        with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print(json.dumps({k: v for k, v in summary.items() if k.startswith(("training_", "evaluation_"))}))


if __name__ == "__main__":
    main()
