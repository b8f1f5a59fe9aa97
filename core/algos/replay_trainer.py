"""Distributed SAC in the Rapid / Ape-X shape: rollout workers -> replay buffer -> learner
workers -> parameter server -> rollout and test workers, each a Ray actor (or all in this process
with --num_workers 0).

The driver only schedules; data moves between actors by object reference. The update-to-data
ratio holds both ways: updates wait for data (at most utd_ratio x env steps collected after the
warm-up), and rollout workers wait for updates (a worker gets its next fragment only while the
env steps stay within updates / utd_ratio plus one fragment per worker), so a fast machine and a
slow one use the same number of samples per update.

Faults: a rollout worker, learner worker or the test worker that dies is replaced (its work in
flight dropped, core/sampling/worker_group.py); an update with a NaN or inf loss or gradient is skipped
by the parameter server; when the replay buffer, the parameter server or one of its replicas
(--learner_sync allreduce) dies, the run restores itself in place from its newest checkpoint
(the buffer's contents too with --checkpoint_buffer), at most --max_failures times.
"""
import argparse
import sys
import time

import numpy as np
from gymnasium import spaces as gym_spaces

from core.lazy_ray import ray
from core.algos.agents import OffPolicyAgent
from core.learning.allreduce import remove_rendezvous_file, rendezvous_file
from core.distributed.devices import (LEARNERS, plan_gpus, plan_of, resolve_device,
                                      resolve_precision)
from core.faults import death_inside, short_error
from core.learning.parameter_server import (ParameterServer, learner_threads,
                                           spawn_learner)
from core.distributed.placement import Placement, cpus_per_actor
from core.plugins import env_label
from core.errors import ConfigError
from core.learning.her import STRATEGIES, HERReplayBuffer, check_her
from core.learning.device_replay import TorchReplayBuffer
from core.learning.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from core.learning.sequence_replay import PrioritizedSequenceReplayBuffer, SequenceReplayBuffer
from core.spaces import carried
from core.sampling.rollout import make_rollout_worker
from core import seeding
from core.algos.trainer import Iteration, LoopPartLost, Trainer
from core.algos.trainers import register_trainer
from core.sampling.worker_group import MISSING, WorkerGroup, alive
from core.argtypes import (auto_or_positive_int, non_negative_float, non_negative_int,
                             positive_float, positive_int, unit_interval)

# The model's update statistics (BaseModel.update_metrics) go between these two.
METRIC_COLUMNS = [
    "iteration", "env_steps", "wall_time_s", "steps_per_s", "updates", "updates_per_s",
    "utd_achieved", "replay_size", "train_return", "train_length", "episodes", "eval_return",
    "eval_return_std", "eval_success_rate", "eval_env_steps",
]
METRIC_COLUMNS_AFTER_MODEL = [
    "grad_norm", "policy_lag", "gradient_lag", "workers", "worker_restarts",
    "env_errors", "skipped_updates", "recoveries",
]


def add_args(parser):
    group = parser.add_argument_group("replay and learners (the off-policy loop)")
    group.add_argument("--buffer_size", type=positive_int, default=1_000_000,
                       help="replay buffer capacity, in transitions (default: %(default)s)")
    group.add_argument("--learning_starts", type=non_negative_int, default=1000,
                       help="transitions in the buffer before the first update "
                            "(default: %(default)s)")
    group.add_argument("--start_steps", type=non_negative_int, default=1000,
                       help="env steps with uniform random actions at the start, shared by the "
                            "workers (default: %(default)s)")
    group.add_argument("--utd_ratio", type=positive_float, default=1.0,
                       help="gradient updates per env step, held in both directions "
                            "(default: %(default)s)")
    group.add_argument("--num_learners", type=positive_int, default=1,
                       help="learner workers, data-parallel: each computes the gradients of "
                            "batch_size / N of the update's transitions and the parameter "
                            "server averages them by sample count, the same update as one "
                            "learner on the whole batch (default: %(default)s)")
    group.add_argument("--learner_sync", choices=["server", "allreduce"], default="server",
                       help="how --num_learners above 1 average their gradients. server: "
                            "learner workers send them to the parameter server through Ray, "
                            "which applies their average and hands out the weights; allreduce: "
                            "the parameter server and N - 1 replicas of it each compute their "
                            "rows of every batch and average the gradients among themselves "
                            "(torch.distributed gloo on loopback), each applying the same step "
                            "(core/learning/allreduce.py). Needs Ray actors (--num_workers 1 or more) "
                            "(default: %(default)s)")
    group.add_argument("--weight_sync_interval", type=positive_int, default=64,
                       help="env steps a rollout worker takes between weight pulls "
                            "(default: %(default)s)")
    group.add_argument("--prioritized_replay", action=argparse.BooleanOptionalAction, default=False,
                       help="proportional prioritized replay (Schaul et al. 2016) with priorities "
                            "from |TD error|, new data prioritized by the workers (Ape-X)")
    group.add_argument("--priority_alpha", type=non_negative_float, default=0.6,
                       help="prioritization exponent alpha (default: %(default)s)")
    group.add_argument("--priority_beta", type=non_negative_float, default=0.4,
                       help="initial importance-sampling exponent beta, annealed to 1 over "
                            "--total_steps updates (default: %(default)s)")
    group.add_argument("--update_lag", type=int, choices=[0, 1], default=None,
                       help="1: learners compute the next gradients on the weights one version "
                            "old, overlapping with the parameter server's update (as Ape-X and "
                            "Rapid do); 0: every gradient on the newest weights, strictly in turn "
                            "(default: 1 with Ray workers, 0 with --num_workers 0)")
    group.add_argument("--learner_threads", type=auto_or_positive_int, default="auto",
                       help="torch threads of the process that computes SAC updates (the "
                            "parameter server and each learner worker; with --num_workers 0 the "
                            "whole process). Alone, an update is faster with 2 threads than 1; "
                            "in the 2-worker loop on 2 cores it is not: the other processes "
                            "need the second core (BENCHMARKS.md, 'Cost of one SAC update'). "
                            "'auto': 2 with --num_workers 0 on a machine of 2 or more CPUs, "
                            "else --torch_threads (default: %(default)s)")
    group.add_argument("--updates_per_call", type=positive_int, default=4,
                       help="with one learner, updates the parameter server makes per call, "
                            "on as many batches sampled in one buffer call: fewer Ray round "
                            "trips and driver wake-ups per update (default: %(default)s)")
    group.add_argument("--device_rounds", choices=["auto", "on", "off"], default="auto",
                       help="with one learner, the parameter server's updates of one call as "
                            "one round that waits on its device once (the batches staged at "
                            "once, statistics, norms and NaN checks kept on the device until "
                            "the round ends) instead of several times per update. The same "
                            "numbers; a skipped NaN update still counts for the target "
                            "networks. auto: on when the server learns on a GPU "
                            "(default: %(default)s)")
    group.add_argument("--pin_batches", action=argparse.BooleanOptionalAction, default=True,
                       help="in a round on a GPU, batches go to the device from pinned host "
                            "memory with non-blocking copies (default: on)")
    group.add_argument("--cuda_graphs", choices=["auto", "on", "off"], default="auto",
                       nargs="?", const="on",
                       help="in a round on a GPU, the update's forward and backward passes "
                            "are captured once as a CUDA graph and replayed: one launch "
                            "instead of hundreds, 5.6x faster for SAC's 256x256 update on an "
                            "H200 (BENCHMARKS.md, 'GPU'). For models whose class declares its "
                            "update graph-safe (SAC, DQN). auto: wherever that holds; on: the "
                            "same, with a note where it does not (the CPU, another model; "
                            "--cuda_graphs alone means on); off: eager updates "
                            "(default: %(default)s)")
    group.add_argument("--replay_device", choices=["cpu", "cuda"], default="cpu",
                       help="cuda: the replay buffer's columns live on the parameter server's "
                            "GPU, each block copied there once and every batch drawn and "
                            "gathered there (core/learning/device_replay.py: FastTD3's big "
                            "batches). The buffer must share the server's process: "
                            "--num_workers 0 (many envs through --num_envs_per_worker), one "
                            "learner, uniform replay, no HER. Without a GPU for the server it "
                            "stays on the CPU, as torch tensors, and says so "
                            "(default: %(default)s)")
    group.add_argument("--compile_update", choices=["off", "on"], default="off",
                       help="torch.compile the update's loss (the backward pass follows from "
                            "it) in the processes that compute updates, for models whose class "
                            "declares its update graph-safe (SAC, DQN; others with a note). "
                            "Compiling takes tens of seconds at the first update. Off by "
                            "default: on the CPU it made SAC's update slower (BENCHMARKS.md, "
                            "'torch.compile of an update on the CPU') (default: %(default)s)")
    group.add_argument("--her", action=argparse.BooleanOptionalAction, default=False,
                       help="hindsight experience replay (Andrychowicz et al. 2017) for "
                            "goal-conditioned envs (a Dict observation with achieved_goal and "
                            "desired_goal, a vectorized compute_reward): the agent hands the "
                            "buffer whole episodes, and a share of every sampled batch gets "
                            "goals the episode achieved, its rewards recomputed by the env "
                            "(core/learning/her.py)")
    group.add_argument("--her_strategy", choices=STRATEGIES, default="future",
                       help="with --her, where a relabelled transition's goal comes from: the "
                            "goal achieved at a step of the same episode at or after it "
                            "(future), at its last step (final) or at any of its steps "
                            "(episode) (default: %(default)s)")
    group.add_argument("--her_k", type=non_negative_int, default=4,
                       help="with --her, relabelled goals per original one: k/(k+1) of every "
                            "batch is relabelled (default: %(default)s)")
    group.add_argument("--checkpoint_buffer", action="store_true",
                       help="keep the replay buffer's contents in checkpoints (their size grows "
                            "with --buffer_size and the observation size), so a restored run "
                            "learns on at once")
    group.add_argument("--log_steps", type=positive_int, default=1000,
                       help="write a metrics row every this many env steps (default: "
                            "%(default)s)")
    data = parser.add_argument_group("learning from data (offline RL)")
    data.add_argument("--dataset", default=None, metavar="PATH_OR_ID",
                      help="learn from a dataset: a Minari dataset's directory, a Minari id in "
                           "the local store (MINARI_DATASETS_PATH, else ~/.minari/datasets) or a "
                           "D4RL-style .hdf5/.npz file of arrays (core/data/). With "
                           "--offline_ratio 1 no env is stepped but the test worker's: the "
                           "step clock (--total_steps, --eval_interval, --log_steps, "
                           "--checkpoint_interval, metrics' env_steps) counts gradient updates "
                           "(core/algos/offline_trainer.py)")
    data.add_argument("--reward_scale", type=reward_scale_type, default=1.0,
                      help="every reward the replay buffer stores (a dataset's and the online "
                           "ones) multiplied by this; 'auto' (with --dataset): 1000 / (max - "
                           "min) of the dataset's episode returns, IQL's recipe for the "
                           "locomotion datasets (Kostrikov et al. 2021; d3rlpy's "
                           "ReturnBasedRewardScaler(1000)). Evaluations report the env's own "
                           "returns (default: %(default)s)")
    data.add_argument("--offline_ratio", type=unit_interval, default=1.0,
                      help="with --dataset, the share of every batch drawn from the dataset: 1 "
                           "learns from it alone (offline); below 1 rollout workers collect as "
                           "in an online run and the rest of each batch comes from their "
                           "replay (offline-to-online fine-tuning; 0.5 as RLPD) "
                           "(default: %(default)s)")
    data.add_argument("--shard_dataset", action=argparse.BooleanOptionalAction, default=False,
                      help="offline, with --num_learners N above 1: each process that computes "
                           "a share of the update (the learner workers; with --learner_sync "
                           "allreduce the parameter server and its replicas) reads 1/N of the "
                           "dataset's rows (every N-th) into a buffer of its own and draws its "
                           "share of each batch there: no replay buffer actor, no batch "
                           "crossing processes, no process holding the whole dataset "
                           "(core/learning/dataset_shard.py) (default: %(default)s)")


def reward_scale_type(text):
    if str(text).lower() == "auto":
        return "auto"
    return positive_float(text)


def resolved_reward_scale(setting, data=None):
    """--reward_scale as a number: itself, or for 'auto' 1000 / (max - min) of ``data``'s
    (OfflineData) complete episodes' returns."""
    if setting != "auto":
        return float(setting)
    returns = [] if data is None else data.episode_returns
    if len(returns) < 2 or float(np.max(returns) - np.min(returns)) <= 0.0:
        why = ("there is no --dataset" if data is None else
               f"the dataset {data.source}'s {len(returns)} complete episode(s) have no spread "
               f"of returns")
        raise ConfigError(f"--reward_scale auto scales rewards by 1000 / (max - min) of the "
                          f"dataset's episode returns, but {why}. Give a number instead "
                          f"(--reward_scale 1 keeps the rewards).")
    return 1000.0 / float(np.max(returns) - np.min(returns))


def buffer_columns(spaces, normalized):
    """(observation shapes, their dtypes, the action dtype) of a replay buffer's columns: the
    observations as rollout workers carry them (core/spaces.py carried: uint8 pixels as uint8,
    a quarter of float32's memory; indices and masks in their dtypes; the rest float32), the
    actions as the agent hands them (indices for discrete spaces, else float32)."""
    observation_space, action_space = spaces
    shapes, dtypes = carried(observation_space, normalized)
    discrete = isinstance(action_space, (gym_spaces.Discrete, gym_spaces.MultiDiscrete,
                                         gym_spaces.MultiBinary))
    return shapes, dtypes, np.int64 if discrete else np.float32


def spawn_buffer(placement, spec, spaces, with_discounts=False, layout=None):
    """The replay buffer: numpy arrays only, no GPU (core/distributed/devices.py);
    ``with_discounts``: it keeps the transitions' discounts (n-step returns); ``layout``: the
    agent's ``replay_layout`` (None: transitions; else sequences)."""
    args = spec.loop
    observation_space, action_space = spaces
    buffer_cls = PrioritizedReplayBuffer if args.prioritized_replay else ReplayBuffer
    shapes, dtypes, action_dtype = buffer_columns(spaces, args.normalize_obs)
    buffer_kwargs = dict(observation_dtype=dtypes, seed=args.seed, with_discounts=with_discounts,
                         action_dtype=action_dtype)
    if args.reward_scale != 1.0:  # (check_plugins refused it where a buffer cannot keep it)
        buffer_kwargs["reward_scale"] = resolved_reward_scale(args.reward_scale)
    if args.prioritized_replay:
        buffer_kwargs.update(alpha=args.priority_alpha, beta0=args.priority_beta,
                             beta_steps=max(1, int(args.total_steps * args.utd_ratio)))
    if args.her:  # it builds an env of its own from the spec, for compute_reward
        buffer_cls = HERReplayBuffer
        buffer_kwargs.update(spec=spec, strategy=args.her_strategy, k=args.her_k)
    if layout is not None:  # sequences (check_plugins refused what they do not go with)
        buffer_cls = (PrioritizedSequenceReplayBuffer if args.prioritized_replay
                      else SequenceReplayBuffer)
        buffer_kwargs.update(layout)
    if args.replay_device == "cuda":  # in this process, beside the parameter server
        device = resolve_device(plan_of(spec).parameter_server_gpus, "the replay buffer")
        if device == "cpu":
            print("ddrl: --replay_device cuda: the parameter server computes on the CPU "
                  "(no GPU given with --num_gpus, or none torch can use), so the replay "
                  "buffer's tensors stay on the CPU", file=sys.stderr, flush=True)
        return placement.spawn(TorchReplayBuffer, args.buffer_size, shapes, action_space.shape,
                               device=device, num_cpus=0, **buffer_kwargs)
    return placement.spawn(buffer_cls, args.buffer_size, shapes, action_space.shape, num_cpus=0,
                           num_gpus=plan_of(spec).replay_buffer_gpus, **buffer_kwargs)


def check_replay_device(args):
    """--replay_device cuda puts the buffer in the parameter server's process, where its
    batches are used: a setting that would put it elsewhere, or that it does not implement,
    is a one-paragraph error."""
    reasons = [(args.num_workers != 0, f"--num_workers {args.num_workers}: with Ray workers "
                "the buffer is an actor of its own, in another process than the parameter "
                "server; use --num_workers 0 and many envs (--num_envs_per_worker)"),
               (args.num_learners != 1, f"--num_learners {args.num_learners}: learner workers "
                "sample the buffer from their own processes; use --num_learners 1"),
               (args.prioritized_replay, "--prioritized_replay: the device buffer is uniform; "
                "leave --prioritized_replay off"),
               (args.her, "--her: hindsight relabelling runs on the host buffer; leave --her "
                "off")]
    found = [text for bad, text in reasons if bad]
    if found:
        raise ConfigError(f"--replay_device cuda keeps the replay buffer on the parameter "
                          f"server's GPU, in its process, but {'; and '.join(found)}. Or use "
                          f"--replay_device cpu.")


def spawn_server(placement, spec, spaces):
    """The parameter server, with the GPU when it computes the updates itself (one learner;
    core/distributed/devices.py)."""
    return placement.spawn(ParameterServer, spec, *spaces, num_cpus=0,
                           num_gpus=plan_of(spec).parameter_server_gpus)


def split_batch(batch_size, parts):
    """The sizes of ``parts`` near-equal shares of one batch: each learner worker samples its
    share, so an update uses ``batch_size`` transitions with any number of learners (a uniform
    sample of B is the union of independent uniform samples of the shares)."""
    return [batch_size // parts + (i < batch_size % parts) for i in range(parts)]


def mean_or_none(values):
    return float(np.mean(values)) if values else None


class CoreActorLost(LoopPartLost):
    """The replay buffer or the parameter server died: the run restores itself in place."""


@register_trainer("replay")
class ReplayTrainer(Trainer):
    """The off-policy loop in the Ape-X shape: rollout workers -> replay buffer -> learner(s)
    -> parameter server (the module's docstring), for every model whose ``trainer`` is "replay"
    (SAC, CrossQ, DQN)."""
    metric_columns = METRIC_COLUMNS + METRIC_COLUMNS_AFTER_MODEL
    add_args = staticmethod(add_args)

    @classmethod
    def metric_columns_for(cls, model_cls, observation_space=None):
        return METRIC_COLUMNS + list(model_cls.update_metrics) + METRIC_COLUMNS_AFTER_MODEL
    #: the buffer and the parameter server are actors: Ray must be up before the loop starts
    starts_without_ray = False
    agent_kind = OffPolicyAgent
    updates_computed_by = LEARNERS

    @classmethod
    def gpu_plan(cls, args):
        return plan_gpus(cls.updates_computed_by, args.num_gpus, args.num_workers,
                         args.num_learners)

    @classmethod
    def for_run(cls, args):
        """--dataset alone (--offline_ratio 1): the loop without rollout workers."""
        if args.dataset and args.offline_ratio >= 1.0:
            from core.algos.trainers import trainer_class
            return trainer_class("offline")  # core/algos/offline_trainer.py
        return cls

    @classmethod
    def fine_tunes_from(cls, args, saved):
        """An offline run (--dataset, --offline_ratio 1) restored with --offline_ratio below 1
        and a dataset: offline-to-online fine-tuning, a new run from its weights."""
        return (bool(args.dataset) and args.offline_ratio < 1.0 and bool(saved.get("dataset"))
                and float(saved.get("offline_ratio", 1.0)) >= 1.0)

    @classmethod
    def check_plugins(cls, plugins, spec):
        """A model that cannot learn from averaged gradients (CrossQ: its batch statistics are
        per batch) says so with ``single_learner_only``; then --num_learners must be 1. The
        settings --replay_device cuda and --her need are checked here, before anything
        starts."""
        reason = plugins.model_cls.single_learner_only
        if reason and spec.loop.num_learners > 1:
            raise ConfigError(f"--num_learners {spec.loop.num_learners} with --model_name "
                              f"{spec.model_name}: {reason} Use --num_learners 1.")
        if spec.loop.replay_device == "cuda":
            check_replay_device(spec.loop)
        if plugins.agent_cls.replay_layout(spec.agent) is not None:
            refused = [flag for bad, flag in ((spec.loop.dataset, "--dataset"),
                                              (spec.loop.her, "--her"),
                                              (spec.loop.replay_device == "cuda",
                                               "--replay_device cuda")) if bad]
            if refused:
                raise ConfigError(f"agent {spec.agent_name!r} stores sequences of a recurrent "
                                  f"policy in replay (core/learning/sequence_replay.py); "
                                  f"{', '.join(refused)} not implemented with them. Leave "
                                  f"{'it' if len(refused) == 1 else 'them'} out.")
        if spec.loop.dataset:
            refused = [flag for bad, flag in ((spec.loop.prioritized_replay,
                                               "--prioritized_replay"), (spec.loop.her, "--her"),
                                              (spec.loop.replay_device == "cuda",
                                               "--replay_device cuda")) if bad]
            if refused:
                raise ConfigError(f"--dataset {spec.loop.dataset}: the dataset's rows are "
                                  f"sampled uniformly from a buffer on the host; "
                                  f"{', '.join(refused)} {'is' if len(refused) == 1 else 'are'}"
                                  f" not implemented with it. Leave "
                                  f"{'it' if len(refused) == 1 else 'them'} off.")
        scaled = [flag for bad, flag in ((spec.loop.her, "--her: relabelled rewards come "
                                          "from the env's compute_reward, unscaled"),
                                         (spec.loop.replay_device == "cuda",
                                          "--replay_device cuda: the device buffer stores "
                                          "rewards as they come"),
                                         (spec.loop.reward_scale == "auto"
                                          and not spec.loop.dataset,
                                          "'auto' reads the returns of a --dataset, and "
                                          "there is none")) if bad]
        if spec.loop.reward_scale != 1.0 and scaled:
            raise ConfigError(f"--reward_scale {spec.loop.reward_scale}: {'; '.join(scaled)}. "
                              f"Leave --reward_scale at 1 here.")
        if spec.loop.her:
            label = env_label(plugins.env_cls, spec.env)
            check_her(spec, plugins, f"{spec.env_name}{' ' + label if label else ''}")

    def start_note(self):
        """', update in fp32 (auto) on 2 threads' and the like: what --sac_precision auto means
        on this machine (fp32 where bf16 is emulated; else timed by the model at its first
        update; a parameter server on another node decides by its own) and the learner's torch
        threads (--learner_threads)."""
        threads = learner_threads(self.args)
        requested = self.plugins.model_cls.update_precision_of(self.spec.model) or "fp32"
        chosen = resolve_precision(requested, "cuda" if self.args.num_gpus else "cpu")
        if requested == "auto" and chosen == "bf16":  # the model times both at its first update
            chosen = "fp32 or bf16 (auto: the faster, timed at the first update)"
        elif requested == "auto":
            chosen += " (auto)"
        mixed = (f"; {self.args.offline_ratio:g} of every batch from {self.dataset_summary}"
                 if self.args.dataset and self.args.offline_ratio < 1.0 else "")
        return f", update in {chosen} on {threads} thread{'s' if threads != 1 else ''}{mixed}"

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        super().__init__(args, spec, plugins, spaces, run, faults, ray_starter)
        self.local = args.num_workers == 0
        self.allreduce = args.learner_sync == "allreduce" and args.num_learners > 1
        if self.allreduce and self.local:
            raise ConfigError(
                f"--learner_sync allreduce runs the {args.num_learners} learners as processes "
                f"(Ray actors), but --num_workers 0 runs everything in this process. Use "
                f"--num_workers 1 or more, or --learner_sync server.")
        if args.shard_dataset and not self.shards_datasets:
            raise ConfigError(
                "--shard_dataset spreads an offline run's dataset over its learners (--dataset "
                "with --offline_ratio 1); this run "
                + ("mixes its dataset with online replay (--offline_ratio below 1), which "
                   "keeps both in one buffer" if args.dataset else "has no --dataset")
                + ". Drop --shard_dataset.")
        self.replicas = []  # with allreduce: the parameter server's replicas, ranks 1..N-1
        self.placement = Placement(local=self.local)
        self.make_core()

        def env_steps():
            return run.env_steps

        # One learner: the parameter server computes the gradients itself (no weights travel
        # per update). Several: learner workers, averaged by the server.
        self.learners = WorkerGroup("learner worker", self.make_learner, faults, env_steps)
        for i in range(args.num_learners if args.num_learners > 1 and not self.allreduce else 0):
            self.learners.add(i, local=self.local)
        self.num_workers = max(1, args.num_workers)
        self.workers = WorkerGroup("rollout worker", self.make_worker, faults, env_steps,
                                   timeout=args.worker_timeout)
        self.add_rollout_workers()
        self.steps_per_env = max(1, args.weight_sync_interval // args.num_envs_per_worker)
        self.fragment = self.steps_per_env * args.num_envs_per_worker
        self.updates_done = 0
        # Replay holds observations as the policy saw them (normalized with the statistics of
        # their fragment), as RLlib's MeanStdFilter does.
        self.restored_replay_size = 0
        self.update_lag = (args.update_lag if args.update_lag is not None
                           else int(not self.placement.local))
        # The loop's bookkeeping; begin() (and a recovery) sets it from the run's counters.
        self.base_env_steps = self.base_updates = 0   # where the budgets count from
        self.env_steps_submitted = self.updates_submitted = 0
        self.weights, self.version = None, 0          # the newest weights handed out (a ref)
        self.learner_weights, self.learner_version = None, 0  # what learner workers compute on
        self.rollouts = {}          # ref -> worker member
        self.updates = []           # refs of ParameterServer.apply / update, oldest first
        self.replica_updates = {}   # ref -> its replicas' update refs (--learner_sync allreduce)
        self.update_counts = {}     # ref -> updates it makes
        self.replay_size = 0
        self.next_log = 0           # env steps at which the next metrics row is due
        self.last_log_time, self.last_log_updates = time.time(), 0
        self.episode_returns, self.episode_lengths, self.lags, self.update_stats = [], [], [], []

    # -- actors --------------------------------------------------------------------------------
    def add_rollout_workers(self):
        for i in range(self.num_workers):
            self.workers.add(i, local=self.local)

    def make_buffer(self):
        if self.args.dataset:  # offline-to-online: the dataset mixed into every batch
            return self.make_mixed_buffer()
        agent_cls = self.plugins.agent_cls
        return spawn_buffer(self.placement, self.spec, self.spaces,
                            agent_cls.transition_discounts,
                            agent_cls.replay_layout(self.spec.agent))

    def read_dataset(self):
        """--dataset's rows as this run's buffer stores them (core/algos/dataset_rows.py:
        discounted for the agent, normalized with the dataset's frozen statistics under
        --normalize_obs); its size, summary line and summary.json entry kept."""
        from core.algos.dataset_rows import dataset_info, prepared_dataset
        data, transitions = prepared_dataset(self.args, self.spec, self.spaces,
                                             self.plugins.agent_cls, self.obs_normalizer)
        self.dataset_rows = len(data)
        self.reward_scale = resolved_reward_scale(self.args.reward_scale, data)
        self.dataset_summary = data.summary() + (f", rewards x {self.reward_scale:.4g}"
                                                 if self.reward_scale != 1.0 else "")
        self.dataset_info = {**dataset_info(data), "reward_scale": self.reward_scale}
        return transitions

    def make_mixed_buffer(self):
        """The online ring beside the dataset's rows (core/learning/mixed_replay.py), each
        batch --offline_ratio of them."""
        from core.learning.mixed_replay import MixedReplayBuffer
        args = self.args
        transitions = self.read_dataset()
        shapes, dtypes, action_dtype = buffer_columns(self.spaces, args.normalize_obs)
        return self.placement.spawn(
            MixedReplayBuffer, args.buffer_size, shapes, self.spaces[1].shape, num_cpus=0,
            dataset=transitions, ratio=args.offline_ratio, observation_dtype=dtypes,
            action_dtype=action_dtype, seed=args.seed, reward_scale=self.reward_scale,
            with_discounts=self.plugins.agent_cls.transition_discounts)

    #: rows of a --dataset in the buffer besides the online ones (they count for the warm-up)
    dataset_rows = 0

    @property
    def steps_per_row(self):
        """The env steps a replay row stands for (the agent's ``env_steps_per_row``):
        ``replay_size`` counts env steps."""
        return self.plugins.agent_cls.env_steps_per_row(self.spec.agent)
    #: whether this loop can spread its dataset over the learners (--shard_dataset)
    shards_datasets = False

    def make_core(self):
        """The replay buffer and the parameter server (again after they died), with its
        replicas in one allreduce group under --learner_sync allreduce."""
        self.buffer = self.make_buffer()
        self.server = spawn_server(self.placement, self.spec, self.spaces)
        if self.allreduce:
            self.replicas = [spawn_server(self.placement, self.spec, self.spaces)
                             for _ in range(self.args.num_learners - 1)]
            path = rendezvous_file()
            shares = split_batch(self.args.batch_size, self.args.num_learners)
            self.remove_group_file()  # a rebuilt group's: its ranks were killed
            self.group_file = path
            # every rank blocks in the rendezvous until all have joined: one get for all
            self.placement.get([handle.join_group.remote(path, rank, shares) for rank, handle
                                in enumerate([self.server, *self.replicas])])

    #: the allreduce group's rendezvous file (core/learning/allreduce.py), or None
    group_file = None

    def remove_group_file(self):
        """The group's ranks read its file while they live (gloo meets through it) and would
        remove it only by ending cleanly, which neither a killed rank nor Ray's shutdown lets
        them: the trainer removes it once they are gone or done (FileStore's destructor skips
        a file already removed). Removed while they live, the group's next allreduce stalls."""
        if self.group_file is not None:
            remove_rendezvous_file(self.group_file)
            self.group_file = None

    def end(self):
        super().end()  # no update in flight: the group's last allreduce is done
        self.remove_group_file()

    def close(self):
        super().close()
        self.remove_group_file()

    def make_learner(self, slot, generation, local, node=None):  # near the driver, always
        return spawn_learner(self.placement, self.spec, self.spaces, slot,
                             compile_update=self.args.compile_update)

    def make_worker(self, slot, generation, local, node=None):
        # The first workers share --start_steps of uniform random actions (the warm-up); a
        # replacement comes after it.
        random_steps = self.args.start_steps // self.num_workers if generation == 0 else 0
        return make_rollout_worker(self.spec, slot, generation, local,
                                   cpus_per_actor(self.num_workers), node, random_steps)

    def check_core(self, error):
        """Raise CoreActorLost if the replay buffer or the parameter server is gone."""
        replicas = [(f"learner replica {rank}", handle)
                    for rank, handle in enumerate(self.replicas, start=1)]
        for name, handle in (("replay buffer", self.buffer), ("parameter server", self.server),
                             *replicas):
            if handle is not None and not alive(handle):
                raise CoreActorLost(f"the {name} died ({short_error(error)})")

    # -- the two budgets of the update-to-data ratio -------------------------------------------
    def updates_allowed(self, env_steps, replay_size):
        if replay_size < max(self.args.learning_starts, self.args.batch_size):
            return 0
        return int(self.args.utd_ratio * max(0, env_steps - self.args.learning_starts)) + 1

    def may_collect(self, env_steps_submitted, updates_done, replay_size=None):
        # The first update needs a whole batch in the buffer too (updates_allowed): without it
        # in the warm-up, --learning_starts below --batch_size left both sides waiting.
        warm_up = max(self.args.learning_starts, self.args.start_steps, self.args.batch_size)
        slack = self.num_workers * self.fragment
        # Nor may the warm-up end before the buffer holds what the first update needs: whole
        # episodes (--her) reach it only as they end, later than their steps are counted.
        if replay_size is not None and replay_size < max(self.args.learning_starts,
                                                         self.args.batch_size):
            return True
        return env_steps_submitted < warm_up + updates_done / self.args.utd_ratio + slack

    # -- the loop: the driver only submits work and books results ------------------------------
    def begin(self):
        self.start_loop()

    def iterate(self):
        """Collection and updates overlap here (on different actors), so the iteration is not
        collect -> learn: the driver turns (submits what the budgets allow, books what
        finished) until a metrics row is due: --log_steps more env steps, an evaluation that
        finished, or a stop request."""
        while True:
            self.turn()
            evaluation = self.evaluate()
            if (self.run.env_steps >= self.next_log or evaluation is not None
                    or self.run.stop_requested):
                self.iteration += 1
                return Iteration(self.metrics_row(), evaluation)

    def weights_and_version(self):
        return self.newest_weights()

    def remote_evaluation(self):
        return not self.local

    def turn(self):
        """Submit what the budgets allow, wait for something to finish (at most 1 s, so hung
        workers and a stop request are noticed), book it."""
        self.workers.poll()
        self.submit_rollouts()
        self.submit_updates()
        done = set(self.placement.wait_any(self.in_flight(), timeout=1.0))
        self.book_rollouts(done)
        self.book_updates(done)
        for ref in self.workers.hung():
            if self.rollouts.pop(ref, None) is not None:
                self.env_steps_submitted -= self.fragment

    def start_loop(self):
        """The bookkeeping from the run's counters (0, a restored checkpoint's, or the
        checkpoint a recovery continues from)."""
        args = self.args
        # Counters start from a restored checkpoint's (0 for a new run).
        self.base_env_steps, self.base_updates = self.run.env_steps, self.updates_done
        self.env_steps_submitted = self.run.env_steps
        self.updates_submitted = self.updates_done
        self.weights, self.version = self.server.get_weights.remote(), self.updates_done
        self.learner_weights, self.learner_version = self.weights, self.version
        self.rollouts, self.updates, self.replica_updates, self.update_counts = {}, [], {}, {}
        # A restored buffer keeps the budgets running as if the run had never stopped; an empty
        # one starts them (and the warm-up) again from the restore point.
        self.replay_size = self.restored_replay_size + self.dataset_rows
        if self.restored_replay_size:
            self.base_env_steps = self.base_updates = 0
        self.next_log = self.run.env_steps + args.log_steps
        self.evaluations.begin()
        self.last_log_time, self.last_log_updates = time.time(), self.updates_done
        self.reset_window()

    def reset_window(self):
        """What one metrics row averages over."""
        self.episode_returns, self.episode_lengths, self.lags, self.update_stats = [], [], [], []

    def in_flight(self):
        pending_eval = self.evaluations.pending
        return (list(self.rollouts) + self.updates
                + ([pending_eval] if pending_eval is not None and not self.local else []))

    def newest_weights(self):
        """(ref, version) of the newest weights. With one learner they leave the server only
        when a rollout or test worker needs them, not after every update."""
        if not self.learners.members and self.version != self.updates_submitted:
            self.weights, self.version = (self.server.get_weights.remote(),
                                          self.updates_submitted)
        return self.weights, self.version

    def submit_rollouts(self):
        """Every idle worker gets a fragment while the data budget allows (a worker still
        starting queues it: Ray runs it once the constructor returns)."""
        busy = set(self.rollouts.values())
        idle = [m for m in sorted(self.workers.members, key=lambda m: m.slot) if m not in busy]
        while idle and self.may_collect(self.env_steps_submitted - self.base_env_steps,
                                        self.updates_done - self.base_updates, self.replay_size):
            member = idle.pop(0)
            # progress: the clock of the model's exploration schedule (begin_fragment)
            ref = self.workers.submit(member, "collect_to_buffer", *self.newest_weights(),
                                      self.steps_per_env, self.buffer,
                                      self.args.prioritized_replay, self.obs_statistics(),
                                      progress=self.env_steps_submitted
                                      / max(1, self.args.total_steps),
                                      whole_episodes=self.args.her)
            self.rollouts[ref] = member
            self.env_steps_submitted += self.fragment

    def submit_updates(self):
        """Updates while the update budget allows, with at most two calls in flight (one
        computing, one queued: the server never idles waiting for the driver)."""
        args = self.args
        buffer = self.buffer if args.prioritized_replay else None
        while len(self.updates) < 2:
            # The budgets count from the restored checkpoint (the buffer starts empty then).
            allowed = self.base_updates + self.updates_allowed(
                self.run.env_steps - self.base_env_steps, self.replay_size)
            if self.updates_submitted >= allowed:
                return
            progress = self.run.env_steps / max(1, args.total_steps)  # the lr schedule's clock
            if self.learners.members:
                count = 1
                ref = self.server.apply.remote(*self.learner_gradients(buffer),
                                               progress=progress)
            else:
                count = min(args.updates_per_call, allowed - self.updates_submitted)
                ref = self.server_updates(count, buffer, progress)
            self.updates.append(ref)
            self.update_counts[ref] = count
            self.updates_submitted += count
            if self.learners.members:
                # Learners compute the next gradients on the weights one version old
                # (update_lag 1) while the server applies this update, or on the newest (0).
                previous = self.weights, self.version
                self.weights, self.version = (self.server.get_weights.remote(),
                                              self.updates_submitted)
                self.learner_weights, self.learner_version = (
                    previous if self.update_lag else (self.weights, self.version))

    def learner_shares(self):
        """[(learner worker, its rows of a batch)], the workers with a share of one."""
        members = self.learners.members
        return [(learner, share) for learner, share in
                zip(members, split_batch(self.args.batch_size, len(members))) if share > 0]

    def learner_gradients(self, buffer):
        """One update's gradients, a ref per learner worker: each on its rows, drawn from the
        replay buffer (``buffer``: the prioritized buffer their priorities go to, or None)."""
        return [learner.handle.compute.remote(self.learner_weights, self.learner_version,
                                              self.buffer.sample.remote(share), buffer)
                for learner, share in self.learner_shares()]

    def server_updates(self, count, buffer, progress):
        """``count`` updates computed by the parameter server (and its allreduce replicas) on
        batches drawn from the replay buffer: the server's ref."""
        batches = self.buffer.sample_batches.remote(self.args.batch_size, count)
        ref = self.server.update.remote(batches, buffer, progress=progress)
        if self.replicas:  # the same batches: each rank computes its own rows
            self.replica_updates[ref] = [replica.update.remote(batches, buffer, progress=progress)
                                         for replica in self.replicas]
        return ref

    def book_rollouts(self, done):
        for ref in [r for r in self.rollouts if r in done]:
            member = self.rollouts.pop(ref)
            try:
                stats = self.workers.take(ref, member)
            except Exception as exc:  # the buffer may have died under it
                if death_inside(exc):
                    self.check_core(exc)
                raise
            if stats is MISSING:  # the worker died: its fragment is dropped
                self.env_steps_submitted -= self.fragment
                continue
            self.run.env_steps += stats.env_steps
            self.faults.env_errors(stats.env_errors, self.run.env_steps)
            # what the agent handed the buffer (whole episodes: those that ended), else every step
            stored = stats.agent_stats.get("transitions", stats.env_steps)
            self.replay_size = min(self.args.buffer_size * self.steps_per_row
                                   + self.dataset_rows, self.replay_size + stored)
            self.episode_returns += stats.episode_returns
            self.episode_lengths += stats.episode_lengths
            self.lags.append(self.updates_done - stats.weights_version)
            self.merge_moments([stats])

    def book_updates(self, done):
        for ref in [r for r in self.updates if r in done]:
            self.updates.remove(ref)
            count = self.update_counts.pop(ref)
            try:
                result = self.placement.get(ref)
                # the replicas ended the same allreduce: done, or about to be
                self.placement.get(self.replica_updates.pop(ref, []))
            except Exception as exc:  # which actor died?
                # (a replica's death fails the others' allreduce with a plain error)
                self.check_core(exc)
                if not death_inside(exc):
                    raise
                # A learner worker died: the update is lost, the budget submits it again.
                self.learners.check_health()
                self.updates_submitted -= count
                continue
            for stats in result if isinstance(result, list) else [result]:
                if stats.get("skipped"):
                    self.faults.update_skipped(stats.get("why", "NaN or inf"),
                                               self.run.env_steps)
                else:
                    self.faults.update_applied()
                    self.update_stats.append(stats)
            self.updates_done += count

    def drain(self):
        """Book every fragment and update in flight, so that a checkpoint's env steps, replay
        buffer, weights and worker states describe the same moment (on save and restore).
        CoreActorLost if the buffer or the server died meanwhile (the session then hands
        ``recover`` the newest checkpoint)."""
        while self.rollouts or self.updates:
            done = set(self.placement.wait_any(list(self.rollouts) + self.updates, timeout=1.0))
            self.book_rollouts(done)
            self.book_updates(done)
            for ref in self.workers.hung():
                self.rollouts.pop(ref, None)

    def recover(self, lost, checkpoint):
        """The replay buffer or the parameter server died: build both again and continue from
        ``checkpoint``, the run's newest (its weights, optimizer, counters and, with
        --checkpoint_buffer, the buffer's contents), or from the start when there is none."""
        where = (f"its checkpoint at env step {int(checkpoint[3].get('env_steps', 0)):,}"
                 if checkpoint is not None else "its start (no checkpoint yet)")
        self.faults.recovered(f"{lost}; the run restores itself in place from {where}",
                              self.run.env_steps)
        # Their fragments went to the dead buffer; the updates to the dead server.
        self.workers.drop(list(self.rollouts) + self.updates)
        self.evaluations.cancel()   # it may wait for weights the dead server held
        for handle in (self.buffer, self.server, *self.replicas,
                       *[m.handle for m in self.learners.members]):
            if not self.local:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self.make_core()
        for member in list(self.learners.members):  # their in-flight gradients are lost too
            self.learners.retire(member)
            self.learners.add(member.slot, local=self.local)
        self.restored_replay_size = 0
        if checkpoint is None:
            self.updates_done, self.run.env_steps = 0, 0
        else:
            weights, optimizer_state, updates, meta, state = checkpoint
            self.restore(weights, optimizer_state, updates)
            self.run.env_steps = int(meta.get("env_steps", 0))
            self.load_evaluation_state(state)
            if state.get("buffer") is not None:
                self.load_buffer(state["buffer"])
        self.start_loop()

    def metrics_row(self):
        now = time.time()
        self.iteration += 1
        row = {
            "iteration": self.iteration, "updates": self.updates_done,
            "updates_per_s": ((self.updates_done - self.last_log_updates)
                              / max(now - self.last_log_time, 1e-9)),
            "utd_achieved": ((self.updates_done - self.base_updates)
                             / max(1, self.run.env_steps - self.base_env_steps
                                   - self.args.learning_starts)),
            "replay_size": self.replay_size,
            "train_return": mean_or_none(self.episode_returns),
            "train_length": mean_or_none(self.episode_lengths),
            "episodes": len(self.episode_returns),
            "policy_lag": mean_or_none(self.lags),
            "workers": len(self.workers.members),
            **self.faults.counts,
        }
        # Over the updates that have the key (CrossQ's actor losses come every policy_delay).
        keys = dict.fromkeys(k for s in self.update_stats for k in s)
        for key in keys:
            if key not in ("skipped", "why"):
                row[key] = float(np.mean([s[key] for s in self.update_stats if key in s]))
        self.reset_window()
        self.last_log_time, self.last_log_updates = now, self.updates_done
        self.next_log = self.run.env_steps + self.args.log_steps
        return row

    # -- checkpoints ---------------------------------------------------------------------------
    def get_state(self):
        """Workers' states (episodes, RNGs, warm-up left) by slot, the observation normalizer
        and, with --checkpoint_buffer, the replay buffer's contents. Called after drain()."""
        state = {**self.worker_states(self.workers, self.workers.members),
                 **self.evaluation_state()}
        if self.args.checkpoint_buffer:
            state["buffer"] = self.placement.get(self.buffer.state_dict.remote())
        return state

    def set_state(self, state, fresh_episode_seed):
        self.load_evaluation_state(state)
        if state.get("buffer") is not None:
            self.load_buffer(state["buffer"])
        by_slot = self.saved_worker_states(state)
        members = sorted(self.workers.members, key=lambda m: m.slot)
        if not members or any(m.slot not in by_slot for m in members):
            return False
        calls = {self.workers.submit(m, "set_state", by_slot[m.slot],
                                     seeding.resumed_worker(fresh_episode_seed, m.slot)): m
                 for m in members}
        return all(self.workers.gather(calls, timeout=None).values())

    def load_buffer(self, buffer_state):
        self.placement.get(self.buffer.load_state_dict.remote(buffer_state))
        self.restored_replay_size = min(self.args.buffer_size, int(
            buffer_state["total_added"])) * self.steps_per_row

    def restore(self, weights, optimizer_state, updates):
        """Continue from a checkpoint: the server's weights, optimizer state and version. The
        replay buffer starts empty unless the checkpoint holds it (--checkpoint_buffer), so
        learning may wait for --learning_starts new transitions again."""
        self.placement.get([handle.load_state.remote(weights, optimizer_state, updates)
                            for handle in (self.server, *self.replicas)])
        self.updates_done = int(updates)

    def checkpoint_state(self):
        return self.placement.get(self.server.state.remote())

    def summary_extra(self):
        """summary.json's ``devices``: where the updates were computed (the parameter server,
        its allreduce replicas, the learner workers), with CUDA's peak memory there
        (core/distributed/devices.py device_info). A part that does not answer is left out."""
        parts = [("parameter server", self.server)]
        parts += [(f"parameter server replica {i + 1}", h) for i, h in enumerate(self.replicas)]
        parts += [(f"learner worker {m.slot}", m.handle) for m in self.learners.members]
        reports = []
        try:
            calls = [(role, handle.device_info.remote()) for role, handle in parts]
            if not self.placement.local:  # the run is over: its summary waits 30 s at most
                ray.wait([ref for _, ref in calls], num_returns=len(calls), timeout=30.0)
        except Exception:  # noqa: BLE001 - a report, never the run's fate
            calls = []
        for role, ref in calls:
            try:
                if self.placement.ready(ref):
                    reports.append({"role": role, **self.placement.get(ref)})
            except Exception:  # noqa: BLE001 - a dead actor: left out
                continue
        extra = {"devices": reports}
        if self.args.dataset:
            extra["dataset"] = self.dataset_info
        return extra

    def recording_groups(self):
        return [self.workers]

    def worker_groups(self):
        return [self.workers, self.learners]
