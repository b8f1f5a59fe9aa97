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
from core.parameter_server import LearnerWorker, ParameterServer
from core.placement import Placement
from core.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from core.rollout import RolloutWorker
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
                            "whole process). A 400x300 update is ~1.5x faster with 2 threads "
                            "than 1 on 2 cores (benchmarks/update_threads.py) (default: "
                            "--torch_threads)")
    group.add_argument("--updates_per_call", type=positive_int, default=4,
                       help="with one learner, updates the parameter server makes per call, "
                            "on as many batches sampled in one buffer call: fewer Ray round "
                            "trips and driver wake-ups per update (default: %(default)s)")
    group.add_argument("--log_steps", type=positive_int, default=1000,
                       help="write a metrics row every this many env steps (default: "
                            "%(default)s)")


class SACTrainer:
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

    # -- the two budgets of the update-to-data ratio -------------------------------------------
    def updates_allowed(self, env_steps, replay_size):
        if replay_size < max(self.args.learning_starts, self.args.batch_size):
            return 0
        return int(self.args.utd_ratio * max(0, env_steps - self.args.learning_starts)) + 1

    def may_collect(self, env_steps_submitted, updates_done):
        warm_up = max(self.args.learning_starts, self.args.start_steps)
        slack = self.num_workers * self.fragment
        return env_steps_submitted < warm_up + updates_done / self.args.utd_ratio + slack

    def train(self):
        args, run, placement = self.args, self.run, self.placement
        weights, version = self.server.get_weights.remote(), 0
        update_lag = args.update_lag if args.update_lag is not None else int(not placement.local)
        learner_weights, learner_version = weights, version
        rollouts = {}   # ref -> worker index
        updates = []    # refs of ParameterServer.apply / update, oldest first
        update_counts = {}  # ref -> updates it makes
        env_steps_submitted = updates_done = updates_submitted = 0
        replay_size = 0
        episode_returns, episode_lengths, lags, update_stats = [], [], [], []
        pending_eval, next_eval, next_log = None, args.eval_interval, args.log_steps
        last_log_time, last_log_updates, iteration = time.time(), 0, 0
        idle = list(range(self.num_workers))

        def newest_weights():
            """With one learner, weights leave the server only when someone needs them."""
            nonlocal weights, version
            if not self.learners and version != updates_submitted:
                weights, version = self.server.get_weights.remote(), updates_submitted
            return weights, version

        while True:
            # Rollouts: every idle worker gets a fragment while the data budget allows.
            while idle and self.may_collect(env_steps_submitted, updates_done):
                i = idle.pop(0)
                ref = self.workers[i].collect_to_buffer.remote(
                    *newest_weights(), self.steps_per_env, self.buffer, args.prioritized_replay)
                rollouts[ref] = i
                env_steps_submitted += self.fragment
            # Updates: while the update budget allows, with at most two in flight.
            while (updates_submitted < self.updates_allowed(run.env_steps, replay_size)
                   and len(updates) < 2):
                buffer = self.buffer if args.prioritized_replay else None
                count = 1
                if self.learners:
                    results = [learner.compute.remote(learner_weights, learner_version,
                                                      self.buffer.sample.remote(args.batch_size),
                                                      buffer)
                               for learner in self.learners]
                    updates.append(self.server.apply.remote(*results))
                else:
                    count = min(args.updates_per_call, self.updates_allowed(
                        run.env_steps, replay_size) - updates_submitted)
                    updates.append(self.server.update.remote(
                        self.buffer.sample_batches.remote(args.batch_size, count), buffer))
                update_counts[updates[-1]] = count
                updates_submitted += count
                if self.learners:
                    previous = weights, version
                    weights, version = self.server.get_weights.remote(), updates_submitted
                    learner_weights, learner_version = (previous if update_lag
                                                        else (weights, version))

            done = set(placement.wait_any(list(rollouts) + updates +
                                          ([pending_eval] if pending_eval is not None else [])))
            for ref in [r for r in rollouts if r in done]:
                stats = placement.get(ref)
                idle.append(rollouts.pop(ref))
                run.env_steps += stats.env_steps
                replay_size = min(args.buffer_size, run.env_steps)  # every fragment is stored
                episode_returns += stats.episode_returns
                episode_lengths += stats.episode_lengths
                lags.append(updates_done - stats.weights_version)
            for ref in [r for r in updates if r in done]:
                updates.remove(ref)
                result = placement.get(ref)
                update_stats += result if isinstance(result, list) else [result]
                updates_done += update_counts.pop(ref)

            eval_result = None
            if pending_eval is not None and pending_eval in done:
                eval_result, pending_eval = placement.get(pending_eval), None
            if pending_eval is None and run.env_steps >= next_eval:
                if self.evaluator is None:
                    self.evaluator = placement.spawn(Evaluator, self.spec, args.eval_episodes,
                                                     num_cpus=0)
                pending_eval = self.evaluator.evaluate.remote(*newest_weights(), run.env_steps)
                next_eval = run.env_steps + args.eval_interval
                if placement.local:
                    eval_result, pending_eval = placement.get(pending_eval), None

            if run.env_steps >= next_log or eval_result is not None:
                iteration += 1
                now = time.time()
                row = {
                    "iteration": iteration, "updates": updates_done,
                    "updates_per_s": (updates_done - last_log_updates) / max(now - last_log_time,
                                                                             1e-9),
                    "utd_achieved": updates_done / max(1, run.env_steps - args.learning_starts),
                    "replay_size": replay_size,
                    "train_return": float(np.mean(episode_returns)) if episode_returns else None,
                    "train_length": float(np.mean(episode_lengths)) if episode_lengths else None,
                    "episodes": len(episode_returns),
                    "policy_lag": float(np.mean(lags)) if lags else None,
                }
                for key in update_stats[0] if update_stats else ():
                    row[key] = float(np.mean([s[key] for s in update_stats]))
                episode_returns, episode_lengths, lags, update_stats = [], [], [], []
                last_log_time, last_log_updates = now, updates_done
                next_log = run.env_steps + args.log_steps
                if run.record(row, eval_result):
                    break
        # Let in-flight work finish so the parameter server's state is consistent.
        placement.get(updates)
        if pending_eval is not None:
            run.record_eval(placement.get(pending_eval))
        self.updates_done = updates_done

    def checkpoint_state(self):
        return self.placement.get(self.server.state.remote())
