"""Peer run: d3rlpy 2.8.1's BC / DiscreteBC, IQL, CQL, DiscreteCQL and TD3PlusBC on a ddrl-written Minari
dataset, with ddrl's hyperparameters, evaluated the way ddrl evaluates an offline run.

    python3 -m venv .venv-d3rlpy
    .venv-d3rlpy/bin/pip install -r benchmarks/requirements-d3rlpy.txt
    .venv-d3rlpy/bin/python benchmarks/d3rlpy_offline.py --dataset DIR --env Pendulum-v1 \
        --algo iql --steps 100000 --eval_interval 5000 --eval_episodes 10 --seed 0 --out /tmp/d3.json

d3rlpy 2.8.1 pins gymnasium 1.0.0 and the project pins gymnasium 1.4.0, so this runs in a venv of
its own and imports nothing from ddrl; benchmarks/offline.py (in ddrl's venv) drives it beside
ddrl with the same values. Every default below is ddrl's default for the same model (models/bc.py,
iql.py, cql.py, cql_discrete.py and their parents' flags), so a bare command is already on ddrl's
terms; the driver passes every value explicitly anyway, read from ddrl's own parser.

The dataset: Minari's HDF5 file (DIR/data/main_data.hdf5, metadata in DIR/data/metadata.json)
read with h5py directly, Box observations only: one group ``episode_<id>`` per episode, ids 0 ..
total_episodes - 1, each with ``observations`` (T + 1 rows: the last is the episode's final
observation), ``actions``, ``rewards``, ``terminations`` and ``truncations`` (T rows each).

One transition per step, as ddrl builds them (core/data/): step t's next observation is the
episode's row t + 1, terminal = the step's termination (a truncation bootstraps). d3rlpy's own
MDPDataset cannot say this: its episodes hold T observation rows, so a truncated (timeout)
episode loses its last step (d3rlpy keeps T - 1 transitions of it) and a terminated one gets a
zero next observation; and it refuses a step that is both terminated and truncated. So the
episodes are built here as d3rlpy ``Episode`` objects of T + 1 rows (the last row's action and
reward are padding that no transition reads as its own), marked not terminated (d3rlpy then
counts T transitions), with the real termination kept beside them; ``OneStepPicker`` (a d3rlpy
TransitionPicker) makes transition t from rows t and t + 1, terminal only at the last step of
a terminated episode. They go into a d3rlpy ``ReplayBuffer`` on an ``InfiniteBuffer``, what
``MDPDataset``'s constructor builds from its arrays.

Equal terms (each line: d3rlpy's setting <- ddrl's flag and default):

- networks: every encoder ``VectorEncoderFactory(hidden_units=--hidden_sizes)`` (ReLU, no
  norm, no dropout) <- --bc_hidden_sizes / --iql_hidden_sizes / --sac_hidden_sizes /
  --dqn_hidden_sizes (256,256);
- batch_size 256 <- --batch_size (d3rlpy's own default is 100 for BC, 32 for DiscreteCQL);
- gamma 0.99 <- --iql_gamma / --sac_gamma / --cql_gamma; tau 0.005 <- --iql_tau / --tau;
- observations: with --normalize_obs, ``StandardObservationScaler`` with the dataset's mean and
  std over the transitions' observations (ddrl's --normalize_obs statistics; eps 1e-8: d3rlpy
  divides by std + eps, ddrl by sqrt(var + 1e-8)); off by default, as ddrl's;
- rewards: --reward_scale, a number or auto (1000 / (max - min) of the returns of the episodes
  that end in a termination or truncation, ddrl's --reward_scale auto, IQL's recipe for
  locomotion), as ``MultiplyRewardScaler`` with that number (d3rlpy's ReturnBasedRewardScaler
  would count every episode); 1 (none) by default, as ddrl's;
- Box actions: ``MinMaxActionScaler`` with the env's bounds (ddrl rescales the bounds to
  [-1, 1] the same way; d3rlpy's continuous policies act in [-1, 1]);
- bc: learning_rate 1e-3 <- --bc_lr; DiscreteBC beta 0.5 <- --bc_beta (both square the
  log-probabilities: d3rlpy's Categorical.logits are normalized); policy_type
  deterministic <- --bc_policy deterministic (ddrl's gaussian fits a log-likelihood, d3rlpy's
  stochastic BC the squared error of a sample: not the same, refused);
- iql: actor_learning_rate 3e-4 <- --iql_actor_lr; critic_learning_rate 3e-4 <- --iql_critic_lr
  (d3rlpy's one critic optimizer holds the Q functions and V: --iql_value_lr must equal it);
  expectile 0.7, weight_temp 3.0, max_weight 100 <- --iql_expectile, --iql_beta,
  --iql_max_weight; the actor's cosine decay to 0 over --steps <- --iql_actor_lr_schedule
  cosine: ``AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=steps))`` on the
  actor (torch's CosineAnnealingLR, stepped once per update: lr0 (1 + cos(pi t / T)) / 2);
- cql: actor 1e-4, critic 3e-4, temperature 1e-4, alpha 1e-4 learning rates <- --actor_lr,
  --critic_lr, --alpha_lr, --cql_lagrange_lr; initial_temperature 1 <- --init_alpha;
  initial_alpha 1 <- --cql_init_lagrange; alpha_threshold 10 <- --cql_target_gap;
  conservative_weight 5 <- --cql_alpha; n_action_samples 10 <- --cql_n_actions; soft_q_backup
  off <- --cql_backup mean (soft: on; sample has no d3rlpy form);
- td3_plus_bc: actor and critic learning rates 3e-4 <- --actor_lr, --critic_lr; alpha 2.5 <-
  --td3_bc_alpha; target_smoothing_sigma 0.2, target_smoothing_clip 0.5 <-
  --target_policy_noise, --target_noise_clip; update_actor_interval 2 <- --policy_delay (d3rlpy
  updates the actor at grad_step 0, 2, 4, ..., ddrl at its 2nd, 4th, ... update; d3rlpy values
  the actor's loss with the critic it has just stepped, ddrl from the same weights);
- discrete_cql: learning_rate 6.25e-5 <- --dqn_lr; target_update_interval 8000 <-
  --target_update_interval (a hard copy); alpha 1 <- --cql_alpha; gradients clipped at norm 10
  <- --max_grad_norm (``AdamFactory(clip_grad_norm=10)``; d3rlpy's default clips nothing);
  double DQN and the Huber loss are DiscreteCQL's own, as ddrl's (--double_q, n_step 1).

Training: d3rlpy's own ``fit`` (n_steps=--steps, n_steps_per_epoch=--eval_interval, no
progress bar, nothing saved, logging into ``TimingAdapter`` below), one torch thread,
``d3rlpy.seed(--seed)``. Evaluation after every epoch (so every --eval_interval updates, the last
at --steps), by ``EpisodeEvaluator`` here, not d3rlpy's EnvironmentEvaluator (which gives no
std): --eval_episodes episodes on ``gymnasium.make(ENV)``, deterministic actions
(``algo.predict``), episode k after t updates reset with seed
``seed + 1_000_000 + k + 1_000 * t``, the reset seeds ddrl's test worker uses
(core/seeding.py ``evaluation_episode``), so both systems start from the same states.

Time: from this script's first statement (before the imports), as ddrl's ``wall_time_s``.
``train_time_s`` is the training steps alone (batch sampling and updates), evaluation and
d3rlpy's metric logging excluded: per epoch, from the moment d3rlpy's logger handed over (the
parameters written for the first epoch, the previous epoch's metrics written for the others)
to the ``epoch_callback`` at the epoch's last update. ``time_per_update_s`` = train_time_s /
steps. d3rlpy's own per-step timer (``time_step``, sample + update) is recorded beside it.

Writes --out (JSON): system, algo, d3rlpy class, dataset, env, config (every resolved value
here), d3rlpy_config (the algorithm's own serialized config), seed, curve [[updates,
wall_time_s at the evaluation's end, eval_return mean, std]], train_time_s,
time_per_update_s, eval_time_s, wall_time_s, final_eval_return(_std), time_to_final_s (the
wall time when the last evaluation ended), the dataset's size.
"""
import time

START_TIME = time.time()  # the run's clock, as ddrl's: from process start

import argparse  # noqa: E402 - after START_TIME
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

SYSTEM = "d3rlpy 2.8.1"
ALGOS = ("bc", "iql", "cql", "discrete_cql", "td3_plus_bc")
EVALUATION_OFFSET = 1_000_000  # ddrl's core/seeding.py


def hidden_sizes(text):
    sizes = [int(x) for x in str(text).replace("[", "").replace("]", "").split(",") if x.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"hidden sizes as 256,256, got {text!r}")
    return sizes


def reward_scale(text):
    if str(text).lower() == "auto":
        return "auto"
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--reward_scale {text}: a positive number or auto")
    return value


def resolved_reward_scale(setting, episodes):
    """--reward_scale as a number (ddrl's core/algos/replay_trainer.py resolved_reward_scale:
    only episodes whose last step is a termination or truncation count)."""
    if setting != "auto":
        return float(setting)
    returns = [float(np.sum(rewards, dtype=np.float64))
               for _, _, rewards, term, trunc in episodes if len(rewards) and (term[-1] or trunc[-1])]
    if len(returns) < 2 or max(returns) - min(returns) <= 0:
        raise SystemExit("--reward_scale auto: the dataset's complete episodes have no spread "
                         "of returns")
    return 1000.0 / (max(returns) - min(returns))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    b = argparse.BooleanOptionalAction
    p.add_argument("--dataset", required=True, help="a Minari dataset directory (DIR/data/...)")
    p.add_argument("--env", required=True, help="the gymnasium id evaluated on")
    p.add_argument("--algo", required=True, choices=ALGOS,
                   help="bc (DiscreteBC on Discrete actions), iql, cql, discrete_cql, td3_plus_bc")
    p.add_argument("--steps", type=int, default=100_000, help="gradient updates")
    p.add_argument("--eval_interval", type=int, default=5_000,
                   help="updates between evaluations (d3rlpy's n_steps_per_epoch); must divide "
                        "--steps")
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--eval_sampled", action="store_true",
                   help="evaluate with sampled actions: DiscreteBC's from the softmax of its "
                        "logits (d3rlpy's own sample_action is the argmax for BC), the others "
                        "through algo.sample_action (ddrl: --no-eval_deterministic)")
    p.add_argument("--fresh_eval_seeds", type=int, default=0,
                   help="after training, play the final weights for this many blocks of "
                        "--fresh_eval_episodes fresh episodes (seeds no training evaluation "
                        "used), their block means and a 95%% bootstrap interval over them in "
                        "the JSON: ddrl evaluate's --eval_seeds K --eval_episodes N, for "
                        "d3rlpy's weights (default 0: none)")
    p.add_argument("--fresh_eval_episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (ddrl's default 1)")
    p.add_argument("--out", required=True, help="the JSON written")
    p.add_argument("--profile_updates", type=int, default=0,
                   help="instead of fitting: build the algo on the dataset, make 50 untimed "
                        "updates, then this many under torch's profiler on batches drawn by "
                        "d3rlpy's own sampler; the JSON gets the update's time by operator, "
                        "matrix products (addmm, mm, bmm, baddbmm) apart (ddrl's side: "
                        "benchmarks/probe.py update-profile)")
    # -- shared (ddrl's defaults) --
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--hidden_sizes", type=hidden_sizes, default=[256, 256])
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--tau", type=float, default=0.005, help="iql, cql: polyak coefficient")
    p.add_argument("--normalize_obs", action=b, default=False,
                   help="StandardObservationScaler with the dataset's mean and std")
    p.add_argument("--obs_scaler_eps", type=float, default=1e-8)
    p.add_argument("--reward_scale", type=reward_scale, default=1.0,
                   help="rewards multiplied by this; auto: 1000 / (max - min) of the complete "
                        "episodes' returns (ddrl's --reward_scale)")
    # -- bc / discrete bc / discrete_cql --
    p.add_argument("--learning_rate", type=float, default=None,
                   help="bc: 1e-3 (ddrl --bc_lr); discrete_cql: 6.25e-5 (ddrl --dqn_lr)")
    p.add_argument("--policy_type", choices=["deterministic"], default="deterministic",
                   help="bc on Box actions (ddrl --bc_policy deterministic)")
    p.add_argument("--beta", type=float, default=0.5, help="DiscreteBC's logit penalty (--bc_beta)")
    # -- iql / cql --
    p.add_argument("--actor_learning_rate", type=float, default=None,
                   help="iql 3e-4 (--iql_actor_lr), cql 1e-4 (--actor_lr)")
    p.add_argument("--critic_learning_rate", type=float, default=3e-4,
                   help="iql: Q and V (--iql_critic_lr = --iql_value_lr); cql (--critic_lr)")
    # -- iql --
    p.add_argument("--actor_lr_schedule", choices=["cosine", "constant"], default="cosine",
                   help="iql: the actor's lr decays by a cosine to 0 over --steps "
                        "(--iql_actor_lr_schedule)")
    p.add_argument("--expectile", type=float, default=0.7)
    p.add_argument("--weight_temp", type=float, default=3.0, help="--iql_beta")
    p.add_argument("--max_weight", type=float, default=100.0, help="--iql_max_weight")
    # -- cql --
    p.add_argument("--temp_learning_rate", type=float, default=1e-4, help="--alpha_lr")
    p.add_argument("--alpha_learning_rate", type=float, default=1e-4, help="--cql_lagrange_lr")
    p.add_argument("--initial_temperature", type=float, default=1.0, help="--init_alpha")
    p.add_argument("--initial_alpha", type=float, default=1.0, help="--cql_init_lagrange")
    p.add_argument("--alpha_threshold", type=float, default=10.0, help="--cql_target_gap")
    p.add_argument("--conservative_weight", type=float, default=5.0, help="cql: --cql_alpha")
    p.add_argument("--n_action_samples", type=int, default=10, help="--cql_n_actions")
    p.add_argument("--soft_q_backup", action=b, default=False, help="--cql_backup soft")
    # -- td3_plus_bc --
    p.add_argument("--target_smoothing_sigma", type=float, default=0.2,
                   help="--target_policy_noise")
    p.add_argument("--target_smoothing_clip", type=float, default=0.5, help="--target_noise_clip")
    p.add_argument("--update_actor_interval", type=int, default=2, help="--policy_delay")
    # -- discrete_cql --
    p.add_argument("--target_update_interval", type=int, default=8000)
    p.add_argument("--alpha", type=float, default=None,
                   help="discrete_cql: 1.0 (--cql_alpha); td3_plus_bc: 2.5 (--td3_bc_alpha)")
    p.add_argument("--clip_grad_norm", type=float, default=10.0, help="--max_grad_norm")
    args = p.parse_args(argv)
    if args.learning_rate is None:
        args.learning_rate = 6.25e-5 if args.algo == "discrete_cql" else 1e-3
    if args.alpha is None:
        args.alpha = 2.5 if args.algo == "td3_plus_bc" else 1.0
    if args.actor_learning_rate is None:
        args.actor_learning_rate = 1e-4 if args.algo == "cql" else 3e-4
    if args.steps < 1 or args.eval_interval < 1 or args.steps % args.eval_interval:
        p.error(f"--eval_interval ({args.eval_interval}) must divide --steps ({args.steps})")
    return args


# -- the dataset ------------------------------------------------------------------------------
def read_space(text):
    """A Minari metadata space (its JSON string) -> a dict; Box and Discrete only."""
    space = json.loads(text) if isinstance(text, str) else text
    if space.get("type") not in ("Box", "Discrete"):
        raise SystemExit(f"d3rlpy_offline.py reads Box observations and Box or Discrete "
                         f"actions only; the dataset has {space.get('type')}")
    return space


def read_minari(directory):
    """The episodes of a Minari HDF5 dataset as numpy arrays, and its spaces (dicts):
    ([(observations [T+1, ...], actions [T, ...], rewards [T], terminations [T],
    truncations [T])], observation_space, action_space)."""
    import h5py
    data = os.path.join(directory, "data")
    with open(os.path.join(data, "metadata.json")) as f:
        meta = json.load(f)
    observation_space = read_space(meta["observation_space"])
    action_space = read_space(meta["action_space"])
    if observation_space["type"] != "Box":
        raise SystemExit("d3rlpy_offline.py: Box observations only")
    episodes = []
    with h5py.File(os.path.join(data, "main_data.hdf5"), "r") as f:
        ids = sorted(int(name[len("episode_"):]) for name in f.keys()
                     if name.startswith("episode_"))
        for i in ids:
            g = f[f"episode_{i}"]
            if not isinstance(g["observations"], h5py.Dataset):
                raise SystemExit("d3rlpy_offline.py: Box observations only (a nested group "
                                 "holds this dataset's observations)")
            obs = np.asarray(g["observations"][()], dtype=np.float32)
            actions = np.asarray(g["actions"][()])
            rewards = np.asarray(g["rewards"][()], dtype=np.float32).reshape(-1)
            term = np.asarray(g["terminations"][()], dtype=bool).reshape(-1)
            trunc = np.asarray(g["truncations"][()], dtype=bool).reshape(-1)
            steps = len(rewards)
            if len(obs) != steps + 1 or len(actions) != steps:
                raise SystemExit(f"episode_{i}: {len(obs)} observations for {steps} steps "
                                 f"(Minari stores T + 1)")
            episodes.append((obs, actions, rewards, term, trunc))
    if len(episodes) != int(meta.get("total_episodes", len(episodes))):
        raise SystemExit(f"{directory}: {len(episodes)} episodes, metadata says "
                         f"{meta.get('total_episodes')}")
    return episodes, observation_space, action_space


def build_dataset(episodes, action_space):
    """A d3rlpy ReplayBuffer of ddrl's one-step transitions (module docstring), and the
    observations of its transitions (for the scaler's statistics)."""
    import dataclasses

    from d3rlpy.constants import ActionSpace
    from d3rlpy.dataset import Episode, InfiniteBuffer, ReplayBuffer, Transition

    @dataclasses.dataclass(frozen=True)
    class StepEpisode(Episode):
        """T + 1 rows; ``terminated`` stays False (d3rlpy: T transitions);
        ``ends_terminated``: the episode's last step was a termination."""
        ends_terminated: bool = False

    class OneStepPicker:
        """Transition t of an episode: rows t and t + 1, terminal at the last step of a
        terminated episode."""

        def __call__(self, episode, index):
            last = index == episode.actions.shape[0] - 2
            return Transition(
                observation=episode.observations[index],
                action=episode.actions[index],
                reward=episode.rewards[index],
                next_observation=episode.observations[index + 1],
                next_action=episode.actions[index + 1],
                terminal=float(last and episode.ends_terminated),
                interval=1,
                rewards_to_go=episode.rewards[index:],
            )

    discrete = action_space["type"] == "Discrete"
    start = int(action_space.get("start", 0)) if discrete else 0
    built, seen = [], []
    for obs, actions, rewards, term, trunc in episodes:
        if discrete:
            acts = (actions.astype(np.int64).reshape(-1, 1) - start)
        else:
            acts = actions.astype(np.float32).reshape(len(actions), -1)
        pad = np.zeros((1,) + acts.shape[1:], dtype=acts.dtype)
        built.append(StepEpisode(
            observations=obs,
            actions=np.concatenate([acts, pad]),
            rewards=np.concatenate([rewards, [0.0]]).astype(np.float32).reshape(-1, 1),
            terminated=False,
            ends_terminated=bool(term[-1])))
        seen.append(obs[:-1])
        if (term[:-1] | trunc[:-1]).any():
            raise SystemExit("d3rlpy_offline.py: an episode ends before its last step")
    action_size = int(action_space["n"]) if discrete else int(np.prod(action_space["shape"]))
    dataset = ReplayBuffer(
        InfiniteBuffer(), episodes=built, transition_picker=OneStepPicker(),
        action_space=ActionSpace.DISCRETE if discrete else ActionSpace.CONTINUOUS,
        action_size=action_size)
    return dataset, np.concatenate(seen)


# -- the algorithm ------------------------------------------------------------------------------
def make_algo(args, discrete, action_space, observations, reward_multiplier=1.0):
    """(the d3rlpy algorithm, its class name, this script's resolved config);
    ``reward_multiplier``: --reward_scale resolved."""
    import d3rlpy
    from d3rlpy.models.encoders import VectorEncoderFactory
    from d3rlpy.optimizers import AdamFactory, CosineAnnealingLRFactory
    from d3rlpy.preprocessing import (MinMaxActionScaler, MultiplyRewardScaler,
                                      StandardObservationScaler)

    algo = args.algo
    if discrete and algo in ("iql", "cql", "td3_plus_bc"):
        raise SystemExit(f"d3rlpy 2.8.1's {algo.upper()} takes continuous actions; the dataset's "
                         f"are Discrete (use discrete_cql, or bc for DiscreteBC)")
    if not discrete and algo == "discrete_cql":
        raise SystemExit("discrete_cql needs Discrete actions; use cql")
    encoder = VectorEncoderFactory(hidden_units=list(args.hidden_sizes))
    common = dict(batch_size=args.batch_size)
    scaler = None
    if args.normalize_obs:
        x = observations.astype(np.float64)
        scaler = StandardObservationScaler(mean=x.mean(0).astype(np.float32),
                                           std=x.std(0).astype(np.float32),
                                           eps=args.obs_scaler_eps)
        common["observation_scaler"] = scaler
    if reward_multiplier != 1.0:
        common["reward_scaler"] = MultiplyRewardScaler(multiplier=reward_multiplier)
    if not discrete:
        common["action_scaler"] = MinMaxActionScaler(
            minimum=np.asarray(action_space["low"], dtype=np.float32).reshape(-1),
            maximum=np.asarray(action_space["high"], dtype=np.float32).reshape(-1))
    config = {"batch_size": args.batch_size, "hidden_sizes": list(args.hidden_sizes),
              "normalize_obs": args.normalize_obs,
              "obs_scaler_eps": args.obs_scaler_eps if args.normalize_obs else None,
              "reward_scale": args.reward_scale, "reward_multiplier": reward_multiplier,
              "action_scaler": None if discrete else "minmax (the env's bounds)"}
    if algo == "bc" and discrete:
        cls = d3rlpy.algos.DiscreteBCConfig
        kwargs = dict(learning_rate=args.learning_rate, beta=args.beta, encoder_factory=encoder)
        config.update(learning_rate=args.learning_rate, beta=args.beta)
    elif algo == "bc":
        cls = d3rlpy.algos.BCConfig
        kwargs = dict(learning_rate=args.learning_rate, policy_type=args.policy_type,
                      encoder_factory=encoder)
        config.update(learning_rate=args.learning_rate, policy_type=args.policy_type)
    elif algo == "iql":
        cls = d3rlpy.algos.IQLConfig
        actor_optim = (AdamFactory(lr_scheduler_factory=CosineAnnealingLRFactory(
            T_max=args.steps)) if args.actor_lr_schedule == "cosine" else AdamFactory())
        kwargs = dict(actor_learning_rate=args.actor_learning_rate,
                      critic_learning_rate=args.critic_learning_rate,
                      actor_optim_factory=actor_optim, critic_optim_factory=AdamFactory(),
                      actor_encoder_factory=encoder, critic_encoder_factory=encoder,
                      value_encoder_factory=encoder, gamma=args.gamma, tau=args.tau,
                      n_critics=2, expectile=args.expectile, weight_temp=args.weight_temp,
                      max_weight=args.max_weight)
        config.update(actor_learning_rate=args.actor_learning_rate,
                      critic_learning_rate=args.critic_learning_rate,
                      actor_lr_schedule=args.actor_lr_schedule, gamma=args.gamma, tau=args.tau,
                      expectile=args.expectile, weight_temp=args.weight_temp,
                      max_weight=args.max_weight)
    elif algo == "cql":
        cls = d3rlpy.algos.CQLConfig
        kwargs = dict(actor_learning_rate=args.actor_learning_rate,
                      critic_learning_rate=args.critic_learning_rate,
                      temp_learning_rate=args.temp_learning_rate,
                      alpha_learning_rate=args.alpha_learning_rate,
                      actor_encoder_factory=encoder, critic_encoder_factory=encoder,
                      gamma=args.gamma, tau=args.tau, n_critics=2,
                      initial_temperature=args.initial_temperature,
                      initial_alpha=args.initial_alpha, alpha_threshold=args.alpha_threshold,
                      conservative_weight=args.conservative_weight,
                      n_action_samples=args.n_action_samples,
                      soft_q_backup=args.soft_q_backup, max_q_backup=False)
        config.update({k: v for k, v in kwargs.items() if not k.endswith("_factory")})
    elif algo == "td3_plus_bc":
        cls = d3rlpy.algos.TD3PlusBCConfig
        kwargs = dict(actor_learning_rate=args.actor_learning_rate,
                      critic_learning_rate=args.critic_learning_rate,
                      actor_encoder_factory=encoder, critic_encoder_factory=encoder,
                      gamma=args.gamma, tau=args.tau, n_critics=2,
                      target_smoothing_sigma=args.target_smoothing_sigma,
                      target_smoothing_clip=args.target_smoothing_clip, alpha=args.alpha,
                      update_actor_interval=args.update_actor_interval)
        config.update({k: v for k, v in kwargs.items() if not k.endswith("_factory")})
    else:
        cls = d3rlpy.algos.DiscreteCQLConfig
        kwargs = dict(learning_rate=args.learning_rate,
                      optim_factory=AdamFactory(clip_grad_norm=args.clip_grad_norm),
                      encoder_factory=encoder, gamma=args.gamma, n_critics=1,
                      target_update_interval=args.target_update_interval, alpha=args.alpha)
        config.update(learning_rate=args.learning_rate, clip_grad_norm=args.clip_grad_norm,
                      gamma=args.gamma, target_update_interval=args.target_update_interval,
                      alpha=args.alpha)
    made = cls(**common, **kwargs).create(device=False)
    return made, cls.__name__.replace("Config", ""), config


class EpisodeEvaluator:
    """--eval_episodes episodes (``algo.predict``; sampled actions with --eval_sampled) on
    ``gymnasium.make(env)``,
    episode k after t updates reset with ddrl's seed for it; records (mean, std) and its own
    time. d3rlpy calls it as ``evaluator(algo, dataset)`` after each epoch."""

    def __init__(self, env_id, episodes, seed, steps_per_epoch, action_start, on_result,
                 sampled=False):
        import gymnasium
        self.env = gymnasium.make(env_id)
        self.sampled = sampled
        self.rng = np.random.default_rng(seed + EVALUATION_OFFSET)
        self.episodes, self.seed = episodes, seed
        self.steps_per_epoch, self.action_start = steps_per_epoch, action_start
        self.calls = 0
        self.on_result = on_result

    def __call__(self, algo, dataset):
        start = time.time()
        self.calls += 1
        updates = self.calls * self.steps_per_epoch
        returns = self.play(algo, [self.seed + EVALUATION_OFFSET + k + 1_000 * updates
                                   for k in range(self.episodes)])
        mean = float(np.mean(returns))
        self.on_result(updates, mean, float(np.std(returns)), start, time.time())
        return mean

    def play(self, algo, seeds):
        """One episode per reset seed; their returns."""
        returns = []
        for seed in seeds:
            obs, _ = self.env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                action = self.act(algo, np.asarray(obs, dtype=np.float32)[None])
                if self.action_start:
                    action = action + self.action_start
                obs, reward, terminated, truncated, _ = self.env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        return returns

    def fresh(self, algo, blocks, episodes):
        """--fresh_eval_seeds: ``blocks`` x ``episodes`` episodes of the final weights, reset
        with seeds past every training evaluation's (those stay under 1,000 x the updates);
        each block's mean and the 95% percentile bootstrap interval of their mean (10,000
        resamples, generator seed 0: ddrl evaluate's --eval_seeds interval)."""
        base = self.seed + EVALUATION_OFFSET + 2_000_000_000
        means = [float(np.mean(self.play(algo, [(base + 10_000 * b + k) % 2 ** 32
                                                 for k in range(episodes)])))
                 for b in range(blocks)]
        values = np.asarray(means)
        rng = np.random.default_rng(0)
        resampled = values[rng.integers(0, len(values), size=(10_000, len(values)))].mean(1)
        low, high = np.percentile(resampled, [2.5, 97.5])
        return {"blocks": blocks, "episodes_per_block": episodes, "block_means": means,
                "mean": float(values.mean()), "ci95": [float(low), float(high)],
                "sampled_actions": self.sampled}


    def act(self, algo, obs):
        """The action for one observation [1, ...]: the most likely (``algo.predict``), or
        with --eval_sampled a sample (DiscreteBC: from its logits' softmax)."""
        if not self.sampled:
            return algo.predict(obs)[0]
        if type(algo).__name__ == "DiscreteBC":
            import torch
            with torch.no_grad():
                x = torch.as_tensor(obs)
                scaler = algo.observation_scaler
                if scaler is not None:
                    x = scaler.transform(x)
                logits = algo.impl.modules.imitator(x).logits[0].double()
            p = torch.softmax(logits, dim=0).numpy()
            return int(self.rng.choice(len(p), p=p / p.sum()))
        return algo.sample_action(obs)[0]


def timing_adapter_factory(marks):
    """A d3rlpy LoggerAdapterFactory that writes nothing and records, in ``marks``, when each
    epoch's training may start (``write_params`` before the first, ``after_write_metric``
    after each) and d3rlpy's per-epoch metrics (its step timers and losses)."""
    from d3rlpy.logging import NoopAdapter

    class TimingAdapter(NoopAdapter):
        def write_params(self, params):
            marks["epoch_start"].append(time.time())

        def write_metric(self, epoch, step, name, value):
            marks["metrics"].setdefault(epoch, {})[name] = float(value)

        def after_write_metric(self, epoch, step):
            marks["epoch_start"].append(time.time())

    class Factory:
        def create(self, algo, experiment_name, n_steps_per_epoch):
            return TimingAdapter()

    return Factory()


MATRIX_PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm")


def profile_updates(algo, dataset, args):
    """``--profile_updates``: d3rlpy's update by operator, as benchmarks/probe.py
    update-profile reports ddrl's (the batches drawn before the profiled updates)."""
    from torch.profiler import ProfilerActivity, profile
    algo.build_with_dataset(dataset)
    n = args.profile_updates
    batches = [dataset.sample_transition_batch(args.batch_size) for _ in range(50 + n)]
    for batch in batches[:50]:
        algo.update(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[50:]:
            algo.update(batch)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    products = sum(e.self_cpu_time_total for e in events if e.key in MATRIX_PRODUCTS)
    optimizer = sum(e.self_cpu_time_total for e in events
                    if e.key in ("aten::_fused_adam_", "Optimizer.step#Adam.step"))
    result = {"system": SYSTEM, "algo": args.algo, "dataset": os.path.abspath(args.dataset),
              "profiled_updates": n, "torch_threads": args.threads,
              "profiled_ms_per_update": total / n / 1e3,
              "profiled_ms_per_update_by_group": {
                  "matrix products": products / n / 1e3, "optimizer": optimizer / n / 1e3,
                  "other": (total - products - optimizer) / n / 1e3},
              "top_operators": [{"operator": e.key, "calls_per_update": e.count / n,
                                 "ms_per_update": e.self_cpu_time_total / n / 1e3}
                                for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]]}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"d3rlpy {args.algo}: {result['profiled_ms_per_update']:.2f} ms/update profiled, "
          + ", ".join(f"{k} {v:.2f}" for k, v in result["profiled_ms_per_update_by_group"].items())
          + f"; {args.out}", flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    import d3rlpy
    if d3rlpy.__version__ != "2.8.1":
        raise SystemExit(f"d3rlpy {d3rlpy.__version__} here; this peer is d3rlpy 2.8.1 "
                         f"(benchmarks/requirements-d3rlpy.txt)")
    d3rlpy.seed(args.seed)
    episodes, _, action_space = read_minari(args.dataset)
    discrete = action_space["type"] == "Discrete"
    dataset, observations = build_dataset(episodes, action_space)
    algo, d3_class, config = make_algo(args, discrete, action_space, observations,
                                       resolved_reward_scale(args.reward_scale, episodes))
    resolved = dict(algo=args.algo, d3rlpy_class=d3_class, steps=args.steps,
                    eval_interval=args.eval_interval, eval_episodes=args.eval_episodes,
                    seed=args.seed, torch_threads=args.threads, **config)
    print("d3rlpy_offline.py config: " + json.dumps(resolved, sort_keys=True), flush=True)

    if args.profile_updates:
        return profile_updates(algo, dataset, args)
    curve, marks = [], {"epoch_start": [], "epoch_end": [], "metrics": {}, "eval_s": []}

    def on_result(updates, mean, std, began, ended):
        curve.append([updates, ended - START_TIME, mean, std])
        marks["eval_s"].append(ended - began)
        print(f"d3rlpy {args.algo} seed {args.seed}: {updates} updates, eval {mean:.1f} "
              f"+- {std:.1f}, {ended - START_TIME:.1f} s", flush=True)

    evaluator = EpisodeEvaluator(args.env, args.eval_episodes, args.seed, args.eval_interval,
                                 int(action_space.get("start", 0)) if discrete else 0,
                                 on_result, sampled=args.eval_sampled)
    algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.eval_interval,
             experiment_name=f"d3rlpy-{args.algo}-{args.seed}", with_timestamp=False,
             logger_adapter=timing_adapter_factory(marks), show_progress=False,
             save_interval=10 ** 9, evaluators={"environment": evaluator},
             epoch_callback=lambda a, epoch, step: marks["epoch_end"].append(time.time()))
    end = time.time()
    fresh = (evaluator.fresh(algo, args.fresh_eval_seeds, args.fresh_eval_episodes)
             if args.fresh_eval_seeds > 0 else None)
    epochs = len(marks["epoch_end"])
    train = [marks["epoch_end"][i] - marks["epoch_start"][i] for i in range(epochs)]
    step_timer = [m.get("time_step") for m in marks["metrics"].values()]
    train_time = float(sum(train))
    result = {
        "system": SYSTEM, "algo": args.algo, "d3rlpy_class": d3_class,
        "dataset": os.path.abspath(args.dataset), "env": args.env, "seed": args.seed,
        "config": resolved, "d3rlpy_config": json.loads(algo.config.serialize()),
        "dataset_episodes": len(episodes), "dataset_transitions": int(dataset.transition_count),
        "curve": curve,
        "train_time_s": train_time, "time_per_update_s": train_time / args.steps,
        "updates_per_s": args.steps / train_time if train_time > 0 else None,
        "train_time_per_epoch_s": train,
        "d3rlpy_time_step_mean_s": (float(np.mean([s for s in step_timer if s is not None]))
                                    if any(s is not None for s in step_timer) else None),
        "d3rlpy_metrics_per_epoch": [marks["metrics"][k] for k in sorted(marks["metrics"])],
        "eval_time_s": float(sum(marks["eval_s"])),
        "wall_time_s": end - START_TIME,
        "final_updates": curve[-1][0] if curve else None,
        "final_eval_return": curve[-1][2] if curve else None,
        "final_eval_return_std": curve[-1][3] if curve else None,
        "time_to_final_s": curve[-1][1] if curve else None,
        "fresh_evaluation": fresh,
        "versions": {"d3rlpy": d3rlpy.__version__, "torch": torch.__version__,
                     "gymnasium": __import__("gymnasium").__version__,
                     "python": sys.version.split()[0]},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"d3rlpy {args.algo} seed {args.seed}: final eval {result['final_eval_return']:.1f}, "
          f"{1e3 * result['time_per_update_s']:.2f} ms/update, {result['wall_time_s']:.1f} s; "
          f"{args.out}", flush=True)
    if fresh:
        print(f"d3rlpy {args.algo} seed {args.seed}: final weights on {fresh['blocks']} x "
              f"{fresh['episodes_per_block']} fresh episodes, mean {fresh['mean']:.1f}, 95% "
              f"interval [{fresh['ci95'][0]:.1f}, {fresh['ci95'][1]:.1f}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
