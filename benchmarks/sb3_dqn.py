import time; T0 = time.time()  # noqa: E702  first statement: wall time counts from process start, imports included
# ruff: noqa: E402  (the imports follow that first statement on purpose)
"""Peer run for ddrl's DQN: Stable-Baselines3 DQN, stopped at a target eval return (the sibling of
sb3_ppo.py and sb3_sac.py: the same evaluation callback, stop rule, time origin and summary.json /
eval.csv writer); with --algo qrdqn, sb3-contrib's QRDQN, the peer of ddrl's qr_dqn.

    .venv/bin/python benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams zoo --seed 0 --out_dir /tmp/sb3dqn
    .venv/bin/python benchmarks/sb3_dqn.py --env LunarLander-v3 --hyperparams zoo --seed 0 --out_dir /tmp/sb3dqn_ll
    .venv/bin/python benchmarks/sb3_dqn.py --env ALE/Breakout-v5 --hyperparams zoo --seed 0 --out_dir /tmp/sb3dqn_bo --torch_threads 2
    .venv/bin/python benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams ddrl --num_workers 0 --num_envs_per_worker 1 --no-double_q --seed 0 --out_dir /tmp/sb3dqn_d
    .venv/bin/python benchmarks/sb3_dqn.py --env CartPole-v1 --hyperparams ddrl --no-double_q --verify_ddrl
    .venv/bin/python benchmarks/sb3_dqn.py --algo qrdqn --env CartPole-v1 --hyperparams zoo --seed 0 --out_dir /tmp/qr
    .venv/bin/python benchmarks/sb3_dqn.py --algo qrdqn --env CartPole-v1 --hyperparams ddrl --no-double_q --verify_ddrl

--algo qrdqn (sb3-contrib's QRDQN; ddrl's --model_name qr_dqn): the same mapping as DQN's below,
plus --n_quantiles -> policy_kwargs n_quantiles and Adam's epsilon (ddrl's --qr_adam_eps, default
0.01 / --batch_size, which is QRDQN's own default); ddrl's qr_dqn defaults --max_grad_norm to 0
(no clipping), QRDQN's max_grad_norm None. RL-Zoo's qrdqn.yml CartPole-v1 entry is its DQN
entry with net_arch [256, 256] and n_quantiles 10; other ids get QRDQN's defaults.

Envs: any gymnasium id with Discrete actions and a Box observation. ALE/... ids are built with
ddrl's own Atari chain (envs/gym_env.py wrap_atari with ddrl's default flags, through
sb3_ppo.atari_env), as sb3_ppo.py does for Breakout: SB3 trains on the frames ddrl trains on
(sign-clipped rewards) and is evaluated on whole games at the game's score.

--hyperparams zoo (default): RL-Zoo's entries, DLR-RM/rl-baselines3-zoo hyperparams/dqn.yml at
22e3ff2 (April 2026; the CartPole-v1 and LunarLander values unchanged since e8f79a0, December
2020, LunarLander-v2 renamed -v3 in ad1ae18, June 2025; atari's buffer 1e5 since 4c69c8c and
optimize_memory_usage False since f1064a7, July 2022). What an
entry does not set is SB3's DQN default (read from DQN's signature: tau 1.0, max_grad_norm 10,
exploration_initial_eps 1.0, n_steps 1, gamma 0.99, net_arch [64, 64], or [] after the Nature
CNN). One env (RL-Zoo's n_envs default). Time is counted in env steps, SB3's num_timesteps.

- CartPole-v1 ("Almost Tuned"): n_timesteps 5e4, lr 2.3e-3, batch 64, buffer 1e5,
  learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256, gradient_steps 128,
  exploration_fraction 0.16, exploration_final_eps 0.04, net_arch [256, 256].
- LunarLander-v3 ("Tuned"): n_timesteps 1e5, lr 6.3e-4, batch 128, buffer 5e4, learning_starts 0,
  gamma 0.99, target_update_interval 250, train_freq 4, gradient_steps -1, exploration_fraction
  0.12, exploration_final_eps 0.1, net_arch [256, 256].
- atari (every ALE/... id): CnnPolicy, lr 1e-4, batch 32, buffer 1e5, target_update_interval 1000,
  train_freq 4, gradient_steps 1, exploration_fraction 0.1, exploration_final_eps 0.01,
  optimize_memory_usage False; RL-Zoo's n_timesteps 1e7 (40M frames) and learning_starts 1e5.
  Here a run is 1M frames (250k agent steps, as sb3_ppo.py's Breakout entry) and the two step
  counts that are schedules shrink with it (1/40): learning_starts 2,500 (RL-Zoo's 1% of the run)
  and the epsilon decay over 10% of 250k. Kept at RL-Zoo's 1e5 with a 250k run, the warm-up would
  end after the decay and SB3 would act at epsilon 0.01 from its first update. Evaluation: 5 whole
  games every 25k agent steps (ddrl's Atari evaluation). 2.8 GB per 100k frame stacks; SB3
  stores next observations apart (optimize_memory_usage False): 5.6 GB of replay.
- any other id: RL-Zoo's "default" entry (SB3's defaults, n_timesteps 1e6); target: the id's
  reward_threshold, else none.

Schedules are paced over --total_steps env steps (default: the entry's n_timesteps, so that
epsilon reaches its final value where RL-Zoo's does whatever --max_steps is; SB3's
exploration_fraction is a share of learn()'s total_timesteps, so it is passed as
fraction x total_steps / max_steps).

--hyperparams ddrl: SB3 given exactly ddrl's settings, each by the flag of ddrl's own name and
default (main.py --model_name dqn --agent_name dqn_agent; models/dqn.py, agents/dqn_agent.py,
core/algos/replay_trainer.py, options/options.py): a compare.py suite passes the sb3 row the
ddrl row's own flags. --verify_ddrl parses them with ddrl's parser and checks every value and
default against it. A ddrl setting SB3's DQN cannot express is an error, not a silent
difference: --double_q (SB3's DQN takes the target network's max: give ddrl --no-double_q),
--dueling, --exploration ladder (SB3 has one epsilon, and one draw per vec-env step for all its
envs), --prioritized_replay, --eval_eps above 0 (the evaluation here is greedy), learning_starts
!= start_steps (SB3 acts uniformly at random exactly until it learns), an encoder other than the
Nature CNN on images / the flattened vector otherwise.

The translation (``ddrl_to_sb3``; units: SB3's train_freq counts vec-env steps, one step of all n
envs; its target_update_interval counts env steps, checked in ``_on_step`` once per vec-env step,
i.e. every max(I // n, 1) vec-env steps; ddrl counts updates):

- n_envs = max(1, --num_workers) x --num_envs_per_worker (ddrl's env count; 0 workers = 1).
- --utd_ratio U = gradient_steps / (train_freq x n_envs); gradient_steps -1 means as many as the
  env steps collected (T x n), i.e. U = 1. ddrl collects fragments of
  max(1, --weight_sync_interval // --num_envs_per_worker) steps per env and updates in between,
  so SB3's train_freq T defaults to that (--train_freq to change) and gradient_steps
  G = U x T x n (a whole number >= 1, else refused).
- --target_update_interval K (gradient updates) -> SB3 target_update_interval K / U env steps.
  SB3 copies in _on_step, between bursts: the target network always holds the weights after
  some burst, so it changes at most once per burst of G updates. K < G is refused (pass a smaller
  --train_freq); a K that is not a multiple of G gives intervals of whole bursts averaging K
  (printed). Conversely, SB3's train_freq T, gradient_steps G and target_update_interval I are,
  in ddrl's units, a target change every G x max(1, max(I // n, 1) / T) updates on average:
  RL-Zoo's CartPole (I 10 <= T 256) changes it once per burst, every 128 updates; LunarLander
  every 250 updates (I 250 env steps at U 1; 248 or 252 each), Atari every 250 (1000 x 1/4).
- --tau -> tau (both: target <- tau x online + (1 - tau) x target at each target update).
- epsilon: --eps_initial / --eps_final over --eps_fraction of --total_steps -> exploration_*,
  the fraction rescaled to learn()'s max_steps as above. ddrl holds each fragment's epsilon
  from its start and draws per env; SB3 updates it every vec-env step and draws once per
  vec-env step for all its envs (the same with one env, as in the suites).
- --dqn_lr, --dqn_lr_schedule linear: to 0 at --total_steps env steps (and 0 after it).
- --learning_starts = --start_steps -> learning_starts. ddrl's first update also needs a whole
  batch in the buffer; SB3 samples with repetition from what it holds (learning_starts 0).
- --dqn_hidden_sizes -> net_arch (ReLU MLP, PyTorch's default init in both); on images the Nature
  CNN (--cnn_features -> features_dim; ddrl initializes it orthogonally, SB3's DQN does not);
  --gamma, --n_step -> gamma, n_steps (SB3's n-step replay buffer); --batch_size, --buffer_size,
  --max_grad_norm as they are. Both: the Huber loss, Adam (eps 1e-8) on the online network.

Evaluation: every --eval_freq env steps, --eval_episodes greedy episodes on a separate env (SB3's
evaluate_policy, deterministic); the run stops at the first mean >= --target_return.

Writes OUT_DIR/summary.json (ddrl's keys, plus hyperparams, env, seed, the SB3 settings and what
they are in ddrl's units), OUT_DIR/eval.csv and OUT_DIR/progress.csv (SB3's log), as sb3_ppo.py.
"""
import argparse
import copy
import inspect
import json
import math
import os
import sys

import gymnasium as gym
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_contrib import QRDQN

from sb3_ppo import EvalStop, atari_env, make_eval_env, write_summary  # same eval, stop rule and summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INF = float("inf")
ALGOS = {"dqn": DQN, "qrdqn": QRDQN}
# ddrl's model for each, and what ddrl's flags default to there where the two models differ
DDRL_MODEL = {"dqn": "dqn", "qrdqn": "qr_dqn"}
DDRL_DEFAULTS = {"dqn": dict(max_grad_norm=10.0), "qrdqn": dict(max_grad_norm=0.0)}


def sb3_defaults(algo="dqn"):
    """SB3's DQN (or sb3-contrib's QRDQN) defaults, from its signature (what an RL-Zoo entry
    leaves unset)."""
    return {name: p.default for name, p in inspect.signature(ALGOS[algo].__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


SB3_DEFAULTS = sb3_defaults("dqn")

# RL-Zoo's entries (the docstring): DLR-RM/rl-baselines3-zoo hyperparams/dqn.yml at 22e3ff2.
# n_envs 1 (RL-Zoo's default); eval_freq, eval_episodes and target_return are ours.
ZOO = {
    "CartPole-v1": dict(
        n_envs=1, n_timesteps=50_000, eval_freq=2_000, target_return=475.0,
        dqn=dict(policy="MlpPolicy", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                 learning_starts=1_000, gamma=0.99, target_update_interval=10, train_freq=256,
                 gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                 policy_kwargs=dict(net_arch=[256, 256]))),
    "LunarLander-v3": dict(
        n_envs=1, n_timesteps=100_000, eval_freq=5_000, target_return=200.0,
        dqn=dict(policy="MlpPolicy", learning_rate=6.3e-4, batch_size=128, buffer_size=50_000,
                 learning_starts=0, gamma=0.99, target_update_interval=250, train_freq=4,
                 gradient_steps=-1, exploration_fraction=0.12, exploration_final_eps=0.1,
                 policy_kwargs=dict(net_arch=[256, 256]))),
    # RL-Zoo's n_timesteps 1e7 and learning_starts 1e5, both 1/40 here (the docstring says why)
    "atari": dict(
        n_envs=1, n_timesteps=250_000, eval_freq=25_000, eval_episodes=5, target_return=INF,
        dqn=dict(policy="CnnPolicy", buffer_size=100_000, learning_rate=1e-4, batch_size=32,
                 learning_starts=2_500, target_update_interval=1_000, train_freq=4,
                 gradient_steps=1, exploration_fraction=0.1, exploration_final_eps=0.01,
                 optimize_memory_usage=False)),
    "default": dict(n_envs=1, n_timesteps=1_000_000, eval_freq=10_000, target_return=None,
                    dqn=dict(policy="MlpPolicy")),
}


# RL-Zoo's hyperparams/qrdqn.yml: its CartPole-v1 entry is the DQN one with 10 quantiles
ZOO_QRDQN = {
    "CartPole-v1": dict(ZOO["CartPole-v1"], dqn=dict(
        ZOO["CartPole-v1"]["dqn"], policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10))),
    "default": ZOO["default"],
}


def zoo_entry(env_id, algo="dqn"):
    """RL-Zoo's entry for ``env_id`` (a copy; ``key`` says which), the target filled in."""
    table = ZOO if algo == "dqn" else ZOO_QRDQN
    key = ("atari" if env_id.startswith("ALE/") and "atari" in table else env_id if env_id in table
           else "default")
    entry = copy.deepcopy(table[key])
    entry["key"] = key
    if entry["target_return"] is None:
        threshold = gym.spec(env_id).reward_threshold
        entry["target_return"] = INF if threshold is None else float(threshold)
    return entry


def sb3_in_ddrl_units(train_freq, gradient_steps, target_update_interval, n_envs):
    """What SB3's DQN does in ddrl's units: the update-to-data ratio, the updates per burst, and
    the gradient updates between two changes of the target network (on average). SB3 trains a
    burst of G = gradient_steps (-1: train_freq x n_envs) updates after every train_freq vec-env
    steps, and copies the target in _on_step every max(I // n_envs, 1) vec-env steps: between
    bursts, so at most once per burst."""
    per_burst = train_freq * n_envs if gradient_steps < 0 else gradient_steps
    copy_every = max(target_update_interval // n_envs, 1)  # vec-env steps
    return dict(utd_ratio=per_burst / (train_freq * n_envs), updates_per_burst=per_burst,
                target_update_interval=per_burst * max(1.0, copy_every / train_freq))


def zoo_as_ddrl(env_id, total_steps=None, schedule_steps=None, algo="dqn"):
    """RL-Zoo's entry for ``env_id`` as ddrl's flags ({flag: value}, value None for a switch):
    the flags a compare.py ddrl row gives main.py --model_name dqn. ``total_steps``: ddrl's run
    length (default: the entry's n_timesteps); the epsilon decay keeps its length in env steps,
    RL-Zoo's fraction of ``schedule_steps`` (default: n_timesteps), so --eps_fraction is that
    fraction x schedule_steps / total_steps."""
    z = zoo_entry(env_id, algo)
    d = {**sb3_defaults(algo), **z["dqn"]}
    cnn = d["policy"] == "CnnPolicy"
    net = (d.get("policy_kwargs") or {}).get("net_arch", [] if cnn else [64, 64])
    units = sb3_in_ddrl_units(d["train_freq"], d["gradient_steps"], d["target_update_interval"],
                              z["n_envs"])
    total_steps = total_steps or z["n_timesteps"]
    schedule_steps = schedule_steps or z["n_timesteps"]
    eps_fraction = d["exploration_fraction"] * schedule_steps / total_steps
    if eps_fraction > 1:
        raise ValueError(f"RL-Zoo's epsilon decay ends at env step {eps_fraction * total_steps:g}, "
                         f"after ddrl's --total_steps {total_steps} (--eps_fraction {eps_fraction:g})")
    flags = {"--dqn_hidden_sizes": ",".join(map(str, net)) or "none"}
    if cnn:
        flags.update({"--encoder": "nature_cnn", "--cnn_features": 512})  # SB3's NatureCNN
    flags.update({
        "--dqn_lr": d["learning_rate"], "--dqn_lr_schedule": "constant",
        "--no-dueling": None, "--no-double_q": None,  # SB3's DQN: the target network's max
        "--target_update_interval": round(units["target_update_interval"]),
        "--tau": d["tau"], "--max_grad_norm": d["max_grad_norm"] or 0.0,
        "--exploration": "linear", "--eps_initial": d["exploration_initial_eps"],
        "--eps_final": d["exploration_final_eps"],
        "--eps_fraction": eps_fraction,
        "--eval_eps": 0.0, "--gamma": d["gamma"], "--n_step": d["n_steps"],
        "--buffer_size": d["buffer_size"], "--learning_starts": d["learning_starts"],
        "--start_steps": d["learning_starts"], "--utd_ratio": units["utd_ratio"],
        "--batch_size": d["batch_size"], "--num_envs_per_worker": z["n_envs"],
    })
    if algo == "qrdqn":  # QRDQNPolicy's n_quantiles default 200; Adam's eps 0.01 / batch, ddrl's default
        flags["--n_quantiles"] = (d.get("policy_kwargs") or {}).get("n_quantiles", 200)
    return flags


def as_command_line(flags):
    """{flag: value} as one command-line string (numbers as %g)."""
    parts = []
    for flag, value in flags.items():
        parts.append(flag if value is None else
                     f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(parts)


# -- ddrl's flags ---------------------------------------------------------------------------
def hidden_sizes(text):
    """ddrl's (models/ppo.py): '64,64' -> [64, 64]; 'none' -> []."""
    if str(text).strip().lower() == "none":
        return []
    try:
        sizes = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        sizes = None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of layer widths (or none)")
    return sizes


def ddrl_flag_parser(algo="dqn"):
    """ddrl's flags of a DQN (QR-DQN) run, each named and defaulting as ddrl's (checked by
    --verify_ddrl)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    d = p.add_argument_group("--hyperparams ddrl: ddrl's flags (names and defaults of main.py "
                             "--model_name dqn --agent_name dqn_agent)")
    b = argparse.BooleanOptionalAction
    d.add_argument("--num_workers", type=int, default=2, help="envs: max(1, this) x --num_envs_per_worker")
    d.add_argument("--num_envs_per_worker", type=int, default=4)
    d.add_argument("--total_steps", type=int, default=None,
                   help="env steps the schedules are paced over (ddrl's --total_steps; default: "
                        "ddrl's 1,000,000 with ddrl, the RL-Zoo entry's n_timesteps with zoo)")
    d.add_argument("--dqn_hidden_sizes", type=hidden_sizes, default=[64, 64])
    d.add_argument("--dqn_lr", type=float, default=1e-4)
    d.add_argument("--dqn_lr_schedule", choices=["constant", "linear"], default="constant")
    d.add_argument("--dueling", action=b, default=False, help="refused: SB3's DQN has no dueling head")
    d.add_argument("--double_q", action=b, default=True,
                   help="on (ddrl's default) is refused: SB3's DQN is not double; give --no-double_q")
    d.add_argument("--target_update_interval", type=int, default=1000, help="in gradient updates")
    d.add_argument("--tau", type=float, default=1.0)
    d.add_argument("--max_grad_norm", type=float, default=DDRL_DEFAULTS[algo]["max_grad_norm"],
                   help="0: no clipping (SB3's None)")
    d.add_argument("--exploration", choices=["linear", "ladder", "noisy"], default="linear",
                   help="ladder and noisy are refused (SB3 has one epsilon, no noisy layers)")
    d.add_argument("--eps_initial", type=float, default=1.0)
    d.add_argument("--eps_final", type=float, default=0.05)
    d.add_argument("--eps_fraction", type=float, default=0.1)
    d.add_argument("--eps_base", type=float, default=0.4, help="ladder only")
    d.add_argument("--eps_alpha", type=float, default=7.0, help="ladder only")
    d.add_argument("--eval_eps", type=float, default=0.0, help="above 0 is refused (greedy evaluation here)")
    d.add_argument("--encoder", choices=["auto", "nature_cnn", "small_cnn", "mlp"], default="auto",
                   help="auto: the Nature CNN on images, the vector as it is otherwise")
    d.add_argument("--cnn_features", type=int, default=512)
    d.add_argument("--gamma", type=float, default=0.99)
    d.add_argument("--n_step", type=int, default=1)
    d.add_argument("--buffer_size", type=int, default=1_000_000)
    d.add_argument("--learning_starts", type=int, default=1000)
    d.add_argument("--start_steps", type=int, default=1000)
    d.add_argument("--utd_ratio", type=float, default=1.0)
    d.add_argument("--batch_size", type=int, default=256)
    d.add_argument("--prioritized_replay", action="store_true", help="refused: SB3's DQN replays uniformly")
    d.add_argument("--weight_sync_interval", type=int, default=64,
                   help="ddrl's fragment: sets SB3's default train_freq (the docstring)")
    if algo == "qrdqn":
        d.add_argument("--n_quantiles", type=int, default=200)
        d.add_argument("--qr_adam_eps", type=float, default=None,
                       help="Adam's epsilon (default: 0.01 / --batch_size, QRDQN's own)")
    return p


DDRL_RUN_LENGTH = 1_000_000  # ddrl's --total_steps default


def ddrl_flags(namespace, algo="dqn"):
    """The ddrl flags of ``namespace`` (a parse of ddrl_flag_parser) as {dest: value}."""
    return {a.dest: getattr(namespace, a.dest) for a in ddrl_flag_parser(algo)._actions}


def refuse(why):
    raise SystemExit(f"sb3_dqn.py --hyperparams ddrl: {why}; SB3's DQN (sb3-contrib's QRDQN) has "
                     f"no equal setting, so the comparison would not be on equal terms.")


def linear(start, horizon, max_steps):
    """``start`` decaying linearly to 0 at ``horizon`` env steps, then 0 (ddrl's linear learning
    rate over its --total_steps), from SB3's progress_remaining (1 - steps / max_steps)."""
    def value(progress_remaining):
        steps = (1.0 - progress_remaining) * max_steps
        return start * max(0.0, 1.0 - steps / horizon)
    return value


def ddrl_to_sb3(a, max_steps=None, image=False, train_freq=None, notes=None, algo="dqn"):
    """SB3 DQN keyword arguments equal to ddrl's settings ``a`` (a parse of ddrl_flag_parser),
    and n_envs. The docstring lists the mapping and what is refused. ``max_steps``: the env steps
    learn() runs (default: --total_steps); ``image``: the observation is an image (CnnPolicy);
    ``train_freq``: SB3's vec-env steps per burst (default: ddrl's fragment per env);
    ``notes``: a list that gets what differs in form, not in value."""
    notes = [] if notes is None else notes
    if a.exploration != "linear":
        refuse(f"--exploration {a.exploration} ("
               + ("an epsilon per env slot" if a.exploration == "ladder" else "noisy networks")
               + ")")
    if a.double_q:
        refuse("--double_q (give the ddrl run --no-double_q)")
    if a.dueling:
        refuse("--dueling")
    if a.prioritized_replay:
        refuse("--prioritized_replay")
    if a.eval_eps:
        refuse(f"--eval_eps {a.eval_eps} (SB3 is evaluated greedily here)")
    if a.learning_starts != a.start_steps:
        refuse(f"--learning_starts {a.learning_starts} and --start_steps {a.start_steps} differ")
    if image and a.encoder not in ("auto", "nature_cnn"):
        refuse(f"--encoder {a.encoder} on images (SB3's CnnPolicy is the Nature CNN)")
    if not image and a.encoder not in ("auto", "mlp"):
        refuse(f"--encoder {a.encoder} on a vector")
    total_steps = a.total_steps or DDRL_RUN_LENGTH
    max_steps = max_steps or total_steps
    n_envs = max(1, a.num_workers) * a.num_envs_per_worker
    train_freq = train_freq or max(1, a.weight_sync_interval // a.num_envs_per_worker)
    per_burst = a.utd_ratio * train_freq * n_envs
    if per_burst < 1 or abs(per_burst - round(per_burst)) > 1e-9:
        refuse(f"--utd_ratio {a.utd_ratio} is {per_burst:g} updates per burst of {train_freq} x "
               f"{n_envs} env steps, not a whole number (pass another --train_freq)")
    per_burst = round(per_burst)
    if a.target_update_interval < per_burst:
        refuse(f"--target_update_interval {a.target_update_interval} updates: SB3 changes the "
               f"target between bursts, at most once per {per_burst} updates (pass a smaller "
               f"--train_freq)")
    target_env_steps = round(a.target_update_interval / a.utd_ratio)
    effective = sb3_in_ddrl_units(train_freq, per_burst, target_env_steps, n_envs)
    if a.target_update_interval % per_burst or target_env_steps % n_envs:
        notes.append(f"the target changes between bursts of {per_burst} updates: every "
                     f"{effective['target_update_interval']:g} updates on average for ddrl's "
                     f"{a.target_update_interval}")
    if a.eps_fraction > 0:
        eps_initial, fraction = a.eps_initial, a.eps_fraction * total_steps / max_steps
    else:  # at its final value from the start (SB3's LinearSchedule divides by the fraction)
        eps_initial, fraction = a.eps_final, 1.0
    lr = (linear(a.dqn_lr, total_steps, max_steps) if a.dqn_lr_schedule == "linear"
          else a.dqn_lr)
    policy_kwargs = dict(net_arch=list(a.dqn_hidden_sizes))
    if image:
        policy_kwargs["features_extractor_kwargs"] = dict(features_dim=a.cnn_features)
    if algo == "qrdqn":
        policy_kwargs["n_quantiles"] = a.n_quantiles
        if a.qr_adam_eps is not None:  # else QRDQN's own 0.01 / batch_size, ddrl's default too
            policy_kwargs.update(optimizer_class=torch.optim.Adam,
                                 optimizer_kwargs=dict(eps=a.qr_adam_eps))
    kwargs = dict(policy="CnnPolicy" if image else "MlpPolicy", learning_rate=lr,
                  buffer_size=a.buffer_size, learning_starts=a.learning_starts,
                  batch_size=a.batch_size, tau=a.tau, gamma=a.gamma, train_freq=train_freq,
                  gradient_steps=per_burst, n_steps=a.n_step,
                  target_update_interval=target_env_steps, exploration_fraction=fraction,
                  exploration_initial_eps=eps_initial, exploration_final_eps=a.eps_final,
                  max_grad_norm=a.max_grad_norm or None, policy_kwargs=policy_kwargs)
    return kwargs, n_envs


def ddrl_command_line(values, algo="dqn"):
    """{dest: value} of ddrl's flags as main.py argv (every flag explicit)."""
    argv = []
    for action in ddrl_flag_parser(algo)._actions:
        value = values[action.dest]
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(action, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, (",".join(map(str, value)) or "none") if isinstance(value, list)
                     else str(value)]
    return argv


def verify_ddrl(args):
    """Parse this run's ddrl flags with ddrl's own parser (main.py --model_name dqn --agent_name
    dqn_agent --gym_id ENV): every flag must exist there and give the same value, and every
    default here must be ddrl's (its built-in defaults, --config none). Exits non-zero
    otherwise."""
    sys.path.insert(0, REPO)
    from options.options import parse_args
    algo = args.algo
    base = ["--env_name", "gym_env", "--model_name", DDRL_MODEL[algo], "--agent_name", "dqn_agent",
            "--gym_id", args.env]
    ours = ddrl_flags(args, algo)
    ours["total_steps"] = ours["total_steps"] or DDRL_RUN_LENGTH
    defaults = ddrl_flags(ddrl_flag_parser(algo).parse_args([]), algo)
    defaults["total_steps"] = DDRL_RUN_LENGTH
    try:
        given = parse_args(base + ddrl_command_line(ours, algo))
        built_in = parse_args(base + ["--config", "none"])
    except Exception as e:  # ddrl's ConfigError (an unknown flag or value), or no dqn model
        raise SystemExit(f"sb3_dqn.py --verify_ddrl: ddrl refuses these flags: {e}") from e
    missing = object()
    unequal = {k: (v, getattr(given, k, missing)) for k, v in ours.items()
               if getattr(given, k, missing) != v}
    unequal.update({f"default of {k}": (v, getattr(built_in, k, missing))
                    for k, v in defaults.items() if getattr(built_in, k, missing) != v})
    print(json.dumps(dict(env=args.env, ddrl_flags=" ".join(ddrl_command_line(ours, algo)),
                          unequal={k: [str(x) for x in v] for k, v in unequal.items()}), indent=1))
    if unequal:
        raise SystemExit(f"sb3_dqn.py: these differ from ddrl's: {sorted(unequal)}")
    print("sb3_dqn.py: every flag and default equals ddrl's")


# -- the run ----------------------------------------------------------------------------------
def parse_args(argv=None):
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--algo", choices=sorted(ALGOS), default="dqn")
    algo = first.parse_known_args(argv)[0].algo
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                parents=[ddrl_flag_parser(algo)], allow_abbrev=False)
    p.add_argument("--algo", choices=sorted(ALGOS), default="dqn",
                   help="dqn: SB3's DQN (ddrl's dqn); qrdqn: sb3-contrib's QRDQN (ddrl's qr_dqn) "
                        "(default: %(default)s)")
    p.add_argument("--env", default="CartPole-v1",
                   help="a gymnasium id: CartPole-v1, LunarLander-v3, ALE/... have RL-Zoo entries "
                        "(default: %(default)s)")
    p.add_argument("--hyperparams", choices=["zoo", "ddrl"], default="zoo",
                   help="zoo: RL-Zoo's dqn.yml entry; ddrl: ddrl's flags below (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target_return", type=float, default=None,
                   help="default: the entry's (475 CartPole, 200 LunarLander, none on Atari), "
                        "else the id's reward_threshold")
    p.add_argument("--out_dir", default=None, help="required unless --verify_ddrl")
    p.add_argument("--eval_freq", type=int, default=None,
                   help="env steps between evaluations (default: the entry's: 2,000 CartPole, "
                        "5,000 LunarLander, 25,000 Atari, else 10,000)")
    p.add_argument("--eval_episodes", type=int, default=None, help="default: 5 on Atari, else 10")
    p.add_argument("--max_steps", type=int, default=None,
                   help="env steps at most (default: --total_steps, i.e. RL-Zoo's n_timesteps with "
                        "zoo, ddrl's --total_steps with ddrl)")
    p.add_argument("--train_freq", type=int, default=None,
                   help="with ddrl: SB3's vec-env steps per burst of updates (default: ddrl's "
                        "fragment per env, max(1, weight_sync_interval // num_envs_per_worker))")
    p.add_argument("--torch_threads", type=int, default=1,
                   help="torch threads (default: 1, as sb3_ppo.py)")
    p.add_argument("--verify_ddrl", action="store_true",
                   help="check the ddrl flags against ddrl's parser, then exit (trains nothing)")
    args = p.parse_args(argv)
    if not args.verify_ddrl and not args.out_dir:
        p.error("--out_dir is required")
    return args


def make_env(env_id, n_envs, seed):
    """The training envs (DummyVecEnv): ddrl's Atari chain on ALE ids, else what DQN(env=id)
    builds (Monitor + DummyVecEnv), seeded explicitly."""
    if env_id.startswith("ALE/"):
        return DummyVecEnv([lambda i=i: atari_env(env_id, seed + i) for i in range(n_envs)])
    return make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)


def plain(o):
    """``o`` as JSON values: schedules by description, inf as None."""
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    return getattr(o, "description", getattr(o, "__name__", str(o)))


def build(args):
    """(model, eval env, settings, max_steps, eval_freq, episodes, target)."""
    entry = zoo_entry(args.env, args.algo)
    notes = []
    if args.hyperparams == "zoo":
        n_envs = entry["n_envs"]
        env = make_env(args.env, n_envs, args.seed)
        kwargs = dict(entry["dqn"])
        horizon = args.total_steps or entry["n_timesteps"]
        max_steps = args.max_steps or horizon
        # RL-Zoo's fraction is of its n_timesteps; SB3's of learn()'s total (max_steps)
        kwargs["exploration_fraction"] = (kwargs.get("exploration_fraction", sb3_defaults(args.algo)["exploration_fraction"])
                                          * horizon / max_steps)
        try:
            ddrl_equal = as_command_line(zoo_as_ddrl(args.env, max_steps, horizon, args.algo))
        except ValueError as e:  # ddrl paces its schedules over the run it makes
            ddrl_equal = None
            notes.append(f"no ddrl equal: {e}")
    else:
        horizon = args.total_steps or DDRL_RUN_LENGTH
        max_steps = args.max_steps or horizon
        n_envs = max(1, args.num_workers) * args.num_envs_per_worker
        env = make_env(args.env, n_envs, args.seed)
        kwargs, n_envs = ddrl_to_sb3(args, max_steps, is_image_space(env.observation_space),
                                     args.train_freq, notes, args.algo)
        if callable(kwargs["learning_rate"]):
            kwargs["learning_rate"].description = (f"linear from {args.dqn_lr:g} to 0 at "
                                                   f"{horizon} env steps")
        ddrl_equal = " ".join(ddrl_command_line(ddrl_flags(args, args.algo), args.algo))
    for note in notes:
        print(f"sb3_dqn.py: {note}", flush=True)
    defaults = sb3_defaults(args.algo)
    units = sb3_in_ddrl_units(kwargs.get("train_freq", defaults["train_freq"]),
                              kwargs.get("gradient_steps", defaults["gradient_steps"]),
                              kwargs.get("target_update_interval", defaults["target_update_interval"]),
                              n_envs)
    fraction = kwargs.get("exploration_fraction", defaults["exploration_fraction"])
    units["epsilon_final_at_env_step"] = round(fraction * max_steps)
    model = ALGOS[args.algo](env=env, seed=args.seed, device="cpu", verbose=0, **kwargs)
    target = entry["target_return"] if args.target_return is None else args.target_return
    eval_freq = args.eval_freq or entry["eval_freq"]
    episodes = args.eval_episodes or entry.get("eval_episodes", 10)
    settings = dict(env=args.env, zoo_entry=entry["key"] if args.hyperparams == "zoo" else None,
                    n_envs=n_envs, max_steps=max_steps, schedule_steps=horizon, dqn=kwargs,
                    in_ddrl_units=units, ddrl_flags=ddrl_equal, notes=notes)
    settings["algo"] = args.algo
    print(f"SB3 {ALGOS[args.algo].__name__} ({args.hyperparams}): {json.dumps(plain(settings))}", flush=True)
    return model, make_eval_env(args.env, args.seed), settings, max_steps, eval_freq, episodes, target


def main(argv=None):
    args = parse_args(argv)
    if args.verify_ddrl:
        verify_ddrl(args)
        return
    torch.set_num_threads(args.torch_threads)
    os.makedirs(args.out_dir, exist_ok=True)
    model, eval_env, settings, max_steps, eval_freq, episodes, target = build(args)
    model.set_logger(configure(args.out_dir, ["csv"]))  # progress.csv
    cb = EvalStop(eval_env, eval_freq, episodes, target, os.path.join(args.out_dir, "eval.csv"), t0=T0)
    model.learn(total_timesteps=max_steps, callback=cb)
    cb.csv.close()
    summary = write_summary(args.out_dir, model, cb, t0=T0)
    summary.update(system=f"sb3-{args.algo}-{args.hyperparams}", hyperparams=args.hyperparams, env=args.env,
                   seed=args.seed, updates=int(model._n_updates), settings=plain(settings))
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
