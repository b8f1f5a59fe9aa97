"""Distributed SAC in the Rapid / Ape-X shape: rollout workers -> replay buffer -> learner
workers -> parameter server -> rollout and test workers, each a Ray actor (or all in this process
with --num_workers 0).

The driver only schedules; data moves between actors by object reference. The update-to-data
ratio holds both ways: updates wait for data (at most utd_ratio x env steps collected after the
warm-up), and rollout workers wait for updates (a worker gets its next fragment only while the
env steps stay within updates / utd_ratio plus one fragment per worker), so a fast machine and a
slow one use the same number of samples per update.
"""
import time

import numpy as np

from core.evaluator import Evaluator
from core.normalizer import NormalizedTrainer
from core.parameter_server import LearnerWorker, ParameterServer
from core.placement import Placement
from core.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from core.rollout import RolloutWorker, restore_workers
from options.options import (non_negative_float, non_negative_int, positive_float,
                             positive_int)

METRIC_COLUMNS = [
    "iteration", "env_steps", "wall_time_s", "steps_per_s", "updates", "updates_per_s",
    "utd_achieved", "replay_size", "train_return", "train_length", "episodes", "eval_return",
    "eval_return_std", "critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean", "entropy",
    "td_error_mean", "grad_norm", "policy_lag", "gradient_lag",
]


def add_args(parser):
    group = parser.add_argument_group("replay and learners (SAC)")
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
                       help="learner workers; their gradients for one version are averaged by "
                            "the parameter server (default: %(default)s)")
    group.add_argument("--weight_sync_interval", type=positive_int, default=64,
                       help="env steps a rollout worker takes between weight pulls "
                            "(default: %(default)s)")
    group.add_argument("--prioritized_replay", action="store_true",
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
    group.add_argument("--learner_threads", type=positive_int, default=None,
                       help="torch threads of the process that computes SAC updates (the "
                            "parameter server and each learner worker; with --num_workers 0 the "
                            "whole process). Alone, a 400x300 update is ~1.6x faster with 2 "
                            "threads than 1 (benchmarks/update_cost.py); in the 2-worker "
                            "loop on 2 cores it was not (60 against 58 updates/s): the other "
                            "processes need the second core (default: --torch_threads)")
    group.add_argument("--updates_per_call", type=positive_int, default=4,
                       help="with one learner, updates the parameter server makes per call, "
                            "on as many batches sampled in one buffer call: fewer Ray round "
                            "trips and driver wake-ups per update (default: %(default)s)")
    group.add_argument("--checkpoint_buffer", action="store_true",
                       help="keep the replay buffer's contents in checkpoints (1M LunarLander "
                            "transitions: ~80 MB), so a restored run learns on at once")
    group.add_argument("--log_steps", type=positive_int, default=1000,
                       help="write a metrics row every this many env steps (default: "
                            "%(default)s)")


def mean_or_none(values):
    return float(np.mean(values)) if values else None


class SACTrainer(NormalizedTrainer):
    def __init__(self, args, spec, plugins, spaces, run):
        self.args, self.run, self.spec, self.spaces = args, run, spec, spaces
        self.placement = placement = Placement(local=args.num_workers == 0)
        observation_space, action_space = spaces
        buffer_cls = PrioritizedReplayBuffer if args.prioritized_replay else ReplayBuffer
        buffer_kwargs = dict(observation_dtype=np.float32, action_dtype=np.float32,
                             seed=args.seed)
        if args.prioritized_replay:
            buffer_kwargs.update(alpha=args.priority_alpha, beta0=args.priority_beta,
                                 beta_steps=max(1, int(args.total_steps * args.utd_ratio)))
        self.buffer = placement.spawn(buffer_cls, args.buffer_size, observation_space.shape,
                                      action_space.shape, num_cpus=0, **buffer_kwargs)
        self.server = placement.spawn(ParameterServer, spec, *spaces, num_cpus=0)
        # One learner: the parameter server computes the gradients itself (no weights travel
        # per update). Several: learner workers, averaged by the server.
        self.learners = ([placement.spawn(LearnerWorker, spec, *spaces, i, num_cpus=0)
                          for i in range(args.num_learners)] if args.num_learners > 1 else [])
        self.num_workers = max(1, args.num_workers)
        cpus = run.cpus_per_actor(self.num_workers)
        self.workers = [placement.spawn(RolloutWorker, spec, i, num_cpus=cpus)
                        for i in range(self.num_workers)]
        self.evaluator = None
        self.steps_per_env = max(1, args.weight_sync_interval // args.num_envs_per_worker)
        self.fragment = self.steps_per_env * args.num_envs_per_worker
        self.updates_done = 0
        self.restored_replay_size = 0
        # Replay holds observations as the policy saw them (normalized with the statistics
        # of their fragment), as RLlib's MeanStdFilter does.
        self.make_obs_normalizer(args, observation_space)

    # -- the two budgets of the update-to-data ratio -------------------------------------------
    def updates_allowed(self, env_steps, replay_size):
        if replay_size < max(self.args.learning_starts, self.args.batch_size):
            return 0
        return int(self.args.utd_ratio * max(0, env_steps - self.args.learning_starts)) + 1

    def may_collect(self, env_steps_submitted, updates_done):
        warm_up = max(self.args.learning_starts, self.args.start_steps)
        slack = self.num_workers * self.fragment
        return env_steps_submitted < warm_up + updates_done / self.args.utd_ratio + slack

    # -- the loop: the driver only submits work and books results ------------------------------
    def train(self):
        self.start_loop()
        while True:
            self.submit_rollouts()
            self.submit_updates()
            done = set(self.placement.wait_any(self.in_flight()))
            self.book_rollouts(done)
            self.book_updates(done)
            eval_result = self.evaluate(done)
            if ((self.run.env_steps >= self.next_log or eval_result is not None)
                    and self.run.record(self.metrics_row(), eval_result)):
                break
        # Let in-flight work finish so the parameter server's state is consistent.
        self.placement.get(self.updates)
        if self.pending_eval is not None:
            self.run.record_eval(self.placement.get(self.pending_eval))

    def start_loop(self):
        args = self.args
        self.update_lag = (args.update_lag if args.update_lag is not None
                           else int(not self.placement.local))
        # Counters start from a restored checkpoint's (0 for a new run).
        self.base_env_steps, self.base_updates = self.run.env_steps, self.updates_done
        self.env_steps_submitted = self.run.env_steps
        self.updates_submitted = self.updates_done
        self.weights, self.version = self.server.get_weights.remote(), self.updates_done
        self.learner_weights, self.learner_version = self.weights, self.version
        self.rollouts = {}        # ref -> worker index
        self.updates = []         # refs of ParameterServer.apply / update, oldest first
        self.update_counts = {}   # ref -> updates it makes
        self.idle = list(range(self.num_workers))
        # A restored buffer keeps the budgets running as if the run had never stopped; an empty
        # one starts them (and the warm-up) again from the restore point.
        self.replay_size = self.restored_replay_size
        if self.restored_replay_size:
            self.base_env_steps = self.base_updates = 0
        self.pending_eval = None
        self.next_eval = (self.run.env_steps // args.eval_interval + 1) * args.eval_interval
        self.next_log = self.run.env_steps + args.log_steps
        self.last_log_time, self.last_log_updates = time.time(), self.updates_done
        self.iteration = 0
        self.reset_window()

    def reset_window(self):
        """What one metrics row averages over."""
        self.episode_returns, self.episode_lengths, self.lags, self.update_stats = [], [], [], []

    def in_flight(self):
        return (list(self.rollouts) + self.updates
                + ([self.pending_eval] if self.pending_eval is not None else []))

    def newest_weights(self):
        """(ref, version) of the newest weights. With one learner they leave the server only
        when a rollout or test worker needs them, not after every update."""
        if not self.learners and self.version != self.updates_submitted:
            self.weights, self.version = (self.server.get_weights.remote(),
                                          self.updates_submitted)
        return self.weights, self.version

    def submit_rollouts(self):
        """Every idle worker gets a fragment while the data budget allows."""
        while self.idle and self.may_collect(self.env_steps_submitted - self.base_env_steps,
                                             self.updates_done - self.base_updates):
            i = self.idle.pop(0)
            ref = self.workers[i].collect_to_buffer.remote(
                *self.newest_weights(), self.steps_per_env, self.buffer,
                self.args.prioritized_replay, self.obs_statistics())
            self.rollouts[ref] = i
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
            if self.learners:
                count = 1
                ref = self.server.apply.remote(*[
                    learner.compute.remote(self.learner_weights, self.learner_version,
                                           self.buffer.sample.remote(args.batch_size), buffer)
                    for learner in self.learners])
            else:
                count = min(args.updates_per_call, allowed - self.updates_submitted)
                ref = self.server.update.remote(
                    self.buffer.sample_batches.remote(args.batch_size, count), buffer)
            self.updates.append(ref)
            self.update_counts[ref] = count
            self.updates_submitted += count
            if self.learners:
                # Learners compute the next gradients on the weights one version old
                # (update_lag 1) while the server applies this update, or on the newest (0).
                previous = self.weights, self.version
                self.weights, self.version = (self.server.get_weights.remote(),
                                              self.updates_submitted)
                self.learner_weights, self.learner_version = (
                    previous if self.update_lag else (self.weights, self.version))

    def book_rollouts(self, done):
        for ref in [r for r in self.rollouts if r in done]:
            stats = self.placement.get(ref)
            self.idle.append(self.rollouts.pop(ref))
            self.run.env_steps += stats.env_steps
            self.replay_size = min(self.args.buffer_size,
                                   self.replay_size + stats.env_steps)  # every step is stored
            self.episode_returns += stats.episode_returns
            self.episode_lengths += stats.episode_lengths
            self.lags.append(self.updates_done - stats.weights_version)
            self.merge_obs_moments([stats])

    def book_updates(self, done):
        for ref in [r for r in self.updates if r in done]:
            self.updates.remove(ref)
            result = self.placement.get(ref)
            self.update_stats += result if isinstance(result, list) else [result]
            self.updates_done += self.update_counts.pop(ref)

    def evaluate(self, done):
        """The result of an evaluation that finished, if any; starts the next one when due
        (one at a time: backpressure instead of a growing queue)."""
        eval_result = None
        if self.pending_eval is not None and self.pending_eval in done:
            eval_result, self.pending_eval = self.placement.get(self.pending_eval), None
        if self.pending_eval is None and self.run.env_steps >= self.next_eval:
            if self.evaluator is None:
                self.evaluator = self.placement.spawn(Evaluator, self.spec,
                                                      self.args.eval_episodes, num_cpus=0)
            self.pending_eval = self.evaluator.evaluate.remote(*self.newest_weights(),
                                                               self.run.env_steps,
                                                               self.obs_statistics())
            self.next_eval = self.run.env_steps + self.args.eval_interval
            if self.placement.local:
                eval_result, self.pending_eval = self.placement.get(self.pending_eval), None
        return eval_result

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
        }
        for key in self.update_stats[0] if self.update_stats else ():
            row[key] = float(np.mean([s[key] for s in self.update_stats]))
        self.reset_window()
        self.last_log_time, self.last_log_updates = now, self.updates_done
        self.next_log = self.run.env_steps + self.args.log_steps
        return row

    # -- checkpoints ---------------------------------------------------------------------------
    def get_state(self):
        """Workers' states (episodes, RNGs, warm-up left), the observation normalizer and,
        with --checkpoint_buffer, the replay buffer's contents."""
        state = {"workers": self.placement.get([w.get_state.remote() for w in self.workers]),
                 **self.evaluation_state()}
        if self.args.checkpoint_buffer:
            state["buffer"] = self.placement.get(self.buffer.state_dict.remote())
        return state

    def set_state(self, state, fresh_episode_seed):
        self.load_evaluation_state(state)
        if state.get("buffer") is not None:
            self.placement.get(self.buffer.load_state_dict.remote(state["buffer"]))
            self.restored_replay_size = min(self.args.buffer_size,
                                            int(state["buffer"]["total_added"]))
        return restore_workers(self.placement, self.workers, state, fresh_episode_seed)

    def restore(self, weights, optimizer_state, updates):
        """Continue from a checkpoint: the server's weights, optimizer state and version. The
        replay buffer starts empty (it is not in the checkpoint), so learning waits for
        --learning_starts new transitions again."""
        self.placement.get(self.server.load_state.remote(weights, optimizer_state, updates))
        self.updates_done = int(updates)

    def checkpoint_state(self):
        return self.placement.get(self.server.state.remote())
