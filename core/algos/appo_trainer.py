"""Asynchronous on-policy learning (IMPALA / APPO): rollout workers never wait for the learner.

Every Ray rollout worker always has ``--fragments_in_flight`` collect calls queued (default 2):
when one returns its fragment, the next is submitted at once with the newest weights, so the
worker goes straight on to the queued one while the learner works. The learner (this process)
takes the fragments in the order they arrive, learns as soon as those waiting hold
``--batch_size`` samples (``--num_epochs`` passes of ``--num_minibatches`` V-trace steps over
whole env columns, models/appo.py), and hands out its new weights by reference: no worker
waits for that either. A slow or uneven env then costs only its own worker's throughput, where a
synchronous round (core/algos/ppo_trainer.py) waits for its slowest member.

Off-policy data are corrected by V-trace (core/learning/vtrace.py) and bounded: a fragment
whose policy lag (the learner's updates since the weights that acted it) exceeds
``--max_policy_lag`` when it would be learned is dropped and counted (``dropped_fragments``).
Backpressure: when ``--learner_queue`` fragments wait already, a worker that delivers gets no
new call until the learner has taken some, so the queue and the lag stay bounded when the
learner is the slow part.

Several learners (``--num_learners N``, learner workers as the off-policy loop's): each batch's
env columns are dealt to them in near-equal shares of whole columns, and every minibatch step
is one call to each (the weights out, the gradient of its columns back); the learner averages the
gradients by sample count and steps. Each normalizes the advantages of its own columns (as
RLlib's data-parallel learners do), so with advantage normalization the step is not exactly one
learner's on the union; without it, it is. With Ray workers they start with them: until then
the learner computes alone. A learner that dies mid-batch leaves it: the others finish the
batch on their columns, and its replacement takes part from the next batch on.

A worker that dies mid-fragment loses that fragment whole (a fragment reaches the learner in one
return value or not at all); core/sampling/worker_group.py replaces it and the replacement gets
its calls when it is up. With ``--num_workers 0`` the worker runs in this process, one fragment
at a time with the newest weights: the deterministic mode (exactly resumable).
"""
import argparse
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core.lazy_ray import ray
from core import seeding
from core.algos.agents import OnPolicyAgent
from core.algos.ppo_trainer import METRIC_COLUMNS as PPO_COLUMNS
from core.algos.ppo_trainer import LearnerGradients, PPOTrainer, shared_rate
from core.algos.trainer import Trainer, add_reward_normalization_args
from core.algos.trainers import register_trainer
from core.argtypes import non_negative_int, positive_int
from core.distributed.devices import (DRIVER_LEARNER, LEARNERS, device_info, plan_gpus,
                                      resolve_device, to_cpu)
from core.distributed.placement import LocalRef, Placement, cpus_per_actor
from core.errors import ConfigError
from core.faults import all_finite
from core.learning.learner import Learner, average_gradients
from core.learning.parameter_server import spawn_learner
from core.sampling.rollout import make_rollout_worker
from core.sampling.worker_group import MISSING, WorkerGroup
from core.types import GradientRequest

METRIC_COLUMNS = [c for c in PPO_COLUMNS if c not in ("sample_ahead",)] + [
    "fragments", "dropped_fragments", "queued_fragments", "learner_wait_s", "learners"]
LOSS_KEYS = ("policy_loss", "value_loss", "entropy")


def add_args(parser):
    group = parser.add_argument_group("the asynchronous loop (APPO / IMPALA)")
    group.add_argument("--rollout_steps", type=positive_int, default=32,
                       help="steps per env in each fragment a worker sends the learner "
                            "(default: %(default)s)")
    group.add_argument("--num_epochs", type=positive_int, default=1,
                       help="passes over each learner batch (default: %(default)s)")
    group.add_argument("--num_minibatches", type=positive_int, default=1,
                       help="optimizer steps per pass, each on a share of the batch's env "
                            "columns (default: %(default)s)")
    group.add_argument("--fragments_in_flight", type=positive_int, default=2,
                       help="collect calls queued on each Ray rollout worker: with 2 or "
                            "more a worker starts its next fragment the moment it returns "
                            "one, never waiting for the learner (default: %(default)s)")
    group.add_argument("--max_policy_lag", type=non_negative_int, default=100,
                       help="drop (and count) a fragment acted by weights more than this many "
                            "updates older than the learner's when it would be learned "
                            "(default: %(default)s)")
    group.add_argument("--elastic_start", action=argparse.BooleanOptionalAction, default=True,
                       help="with Ray workers, learn at once from a worker in this process "
                            "while Ray and the workers start; it steps out when all are up "
                            "(--no-elastic_start: learn from the Ray workers only, once every "
                            "one is up, and with --num_learners, once the learner workers are "
                            "up) (default: on)")
    group.add_argument("--num_learners", type=positive_int, default=1,
                       help="learner workers sharing each batch, data-parallel: each holds "
                            "whole fragments (env columns) of it and computes the gradient of "
                            "its columns of every minibatch; the learner applies their "
                            "average weighted by samples. 1: the learner computes alone "
                            "(default: %(default)s)")
    group.add_argument("--learner_queue", type=positive_int, default=None,
                       help="fragments that may wait for the learner before workers that "
                            "deliver get no new call (default: 2 x --num_workers x "
                            "--fragments_in_flight; never fewer than two batches hold)")
    add_reward_normalization_args(group)


@dataclass
class Arrived:
    """A fragment that reached the learner: its rollout stats (``data``: the agent's arrays)
    and when it arrived."""
    stats: object
    at: float = field(default_factory=time.perf_counter)


@dataclass
class Taken:
    """What one iteration took from the queue, and how long the learner waited for it."""
    fragments: list
    dropped: int
    wait: float
    started: float
    progress: float


@register_trainer("appo")
class APPOTrainer(Trainer):
    """IMPALA / APPO: asynchronous rollout workers, one V-trace learner (the module
    docstring)."""
    has_reward_normalization = True
    metric_columns = METRIC_COLUMNS
    line_metrics = (("policy_loss", "pi", ".3f"), ("value_loss", "vf", ".3f"),
                    ("entropy", "ent", ".3f"), ("dropped_fragments", "dropped", "d"))
    add_args = staticmethod(add_args)
    agent_kind = OnPolicyAgent
    #: learning starts with an in-process worker while Ray starts (--elastic_start)
    starts_without_ray = True

    @classmethod
    def learns_while_ray_starts(cls, args):
        """The stand-in worker learns in the driver until the Ray workers are up, unless
        --no-elastic_start waits for them."""
        return super().learns_while_ray_starts(args) and args.elastic_start

    @classmethod
    def gpu_plan(cls, args):
        """One learner: it computes every gradient in this process, and a GPU goes to it.
        Several: the learner workers compute them, on their shares of the GPUs."""
        if args.num_learners > 1:
            return plan_gpus(LEARNERS, args.num_gpus, args.num_workers, args.num_learners)
        return plan_gpus(DRIVER_LEARNER, args.num_gpus, args.num_workers)

    #: the loop's columns, then the model's episode columns (PPO's, on this loop's columns)
    metric_columns_for = classmethod(PPOTrainer.metric_columns_for.__func__)

    @classmethod
    def check_plugins(cls, plugins, spec):
        agent_cls = plugins.agent_cls
        if agent_cls.adopt_data is OnPolicyAgent.adopt_data:
            raise ConfigError(
                f"the asynchronous loop (--model_name {spec.run.model_name}) learns in this "
                f"process on the fragments workers send, so its agent must take other agents' "
                f"data: {agent_cls.__name__} does not define adopt_data. Use vtrace_agent.")
        if spec.loop.num_learners > 1 and not callable(getattr(agent_cls, "split_data", None)):
            raise ConfigError(
                f"--num_learners {spec.loop.num_learners}: the learner workers each take a "
                f"share of a batch's env columns, which the agent cuts (split_data), and "
                f"{agent_cls.__name__} does not define split_data. Use --num_learners 1 or "
                f"vtrace_agent.")

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        super().__init__(args, spec, plugins, spaces, run, faults, ray_starter)
        self.num_remote = args.num_workers
        # weights travel by reference once Ray workers exist; in-process as they are
        self.placement = Placement(local=True)
        self.remote_spawned = False
        torch.manual_seed(args.seed)
        self.model = plugins.model_cls(spec.model, *spaces)
        self.device = resolve_device(spec.gpus.driver_learner_gpus if spec.gpus else 0.0,
                                     "the learner")
        self.model.to(self.device)
        self.learner = Learner(self.model)
        self.agent = LearnerGradients(plugins.agent_cls(spec.agent, self.model,
                                                        seed=seeding.learner_agent(args.seed)))
        self.group = WorkerGroup("rollout worker", self.make_worker, faults,
                                 lambda: run.env_steps, timeout=args.worker_timeout)
        self.learners = WorkerGroup("learner worker", self.make_learner, faults,
                                    lambda: run.env_steps, timeout=args.worker_timeout)
        self.pending_learner_states = {}  # slot -> saved learner worker state
        self.in_flight = {}        # ref -> member
        self.queue = []            # Arrived fragments, oldest first
        self.parked = []           # members that delivered while the queue was full
        self.pending_states = {}   # slot -> saved worker state, applied when it joins
        self.weights_ref, self.weights_version = None, None
        # (never below two batches' worth: workers parked with too little queued for a batch
        # would wait on a learner that waits on them)
        fragment_samples = args.num_envs_per_worker * args.rollout_steps
        self.queue_limit = max(
            args.learner_queue or 2 * max(1, self.num_remote) * args.fragments_in_flight,
            -(-2 * args.batch_size // fragment_samples))
        self.started_whole = False  # every Ray worker has been up (--no-elastic_start waits)
        if self.num_remote == 0:
            self.group.add(0, local=True)
            for slot in range(args.num_learners if args.num_learners > 1 else 0):
                self.learners.add(slot, local=True)
        elif self.learns_while_ray_starts(args):
            # learn from a stand-in in this process until the Ray workers are up (a slot of
            # its own: seeds distinct from every remote worker's)
            self.group.add(self.num_remote, local=True)
        else:
            self.ray_starter.ready(timeout=None)
        self.spawn_remote()
        self.evaluations.prepare()

    def remote_evaluation(self):
        return self.remote_spawned

    def spawn_remote(self):
        """Once Ray is up, start the remote workers (they get calls when their envs are
        built)."""
        if self.remote_spawned or not self.num_remote or not self.ray_starter.ready():
            return
        self.remote_spawned = True
        self.placement = Placement(local=False)
        self.weights_version = None  # shared for Ray from now on
        for slot in range(self.num_remote):
            self.group.add(slot)
        for slot in range(self.args.num_learners if self.args.num_learners > 1 else 0):
            self.learners.add(slot)
        self.evaluations.prepare()

    def make_learner(self, slot, generation, local, node=None):  # near the driver, always
        # --torch_threads, as the rollout workers (this loop has no --learner_threads)
        return spawn_learner(Placement(local=local), self.spec, self.spaces, slot,
                             threads=self.args.torch_threads)

    def make_worker(self, slot, generation, local, node=None):
        return make_rollout_worker(self.spec, slot, generation, local,
                                   cpus_per_actor(self.num_remote), node)

    # -- the fragments' way in ----------------------------------------------------------------
    def current_weights(self):
        """The learner's weights as workers take them: put in Ray's object store once per
        update (every call of that update shares the reference)."""
        if self.weights_version != self.learner.version:
            self.weights_ref = self.placement.share(self.learner.weights_for_workers())
            self.weights_version = self.learner.version
        return self.weights_ref

    def submit(self, member):
        progress = min(1.0, self.run.env_steps / self.args.total_steps)
        ref = self.group.submit(member, "collect", self.current_weights(), self.learner.version,
                                self.args.rollout_steps, self.obs_statistics(), False, True,
                                progress, reward_scaling=self.reward_scaling())
        self.in_flight[ref] = member

    def start_members(self, local=True):
        """Give every member that is up and idle its calls (newly started ones, replacements,
        parked ones once the queue has room), applying a saved state first after a restore;
        ``local``: the in-process worker too (its call samples right away, in this process).
        The in-process stand-in steps out once every remote worker is up."""
        self.spawn_remote()
        if self.remote_spawned:
            joined = self.group.poll(timeout=0)
            # --no-elastic_start: every Ray worker is up before the first fragment is asked
            # for, as PPO's first round waits for them, so which workers the first batches
            # come from does not depend on which process started first (once: a replacement
            # later joins when it is up, the learner never waits for it)
            while (not self.args.elastic_start and not self.started_whole
                   and not all(m.ready for m in self.group.remote_members())
                   and self.run.stop_requested is None):
                joined += self.group.poll(timeout=1.0)
            self.started_whole = True
            for member in joined:
                state = self.pending_states.pop(member.slot, None)
                if state is not None and member.generation == 0:
                    ray.get(member.handle.set_state.remote(state, None))
            for member in self.learners.poll(timeout=0):
                state = self.pending_learner_states.pop(member.slot, None)
                if state is not None and member.generation == 0:
                    ray.get(member.handle.set_state.remote(state))
            stand_ins = [m for m in self.group.members if m.local]
            if stand_ins and all(m.ready for m in self.group.remote_members()):
                retired = [m for m in stand_ins if m not in self.in_flight.values()]
                for member in retired:
                    self.group.retire(member)
                if retired and not self.args.quiet:
                    print(f"ddrl: {self.num_remote} Ray workers up at env step "
                          f"{self.run.env_steps:,} ({self.run.elapsed():.1f} s); the "
                          f"in-process worker steps out", flush=True)
        busy = {}
        for member in self.in_flight.values():
            busy[member] = busy.get(member, 0) + 1
        if len(self.queue) < self.queue_limit:
            self.parked = []
        for member in self.group.ready_members():
            if member in self.parked or (member.local and not local):
                continue
            wanted = 1 if member.local else self.args.fragments_in_flight
            for _ in range(wanted - busy.get(member, 0)):
                self.submit(member)

    def receive(self, timeout, local=True):
        """The fragments that are done (waiting up to ``timeout`` s for the first);
        ``local``: let the in-process worker sample one first."""
        self.start_members(local)
        for ref in self.group.hung():
            self.in_flight.pop(ref, None)
        if not self.in_flight:  # every worker still starting: wait for one, do not spin
            starting = [m.ready_ref for m in self.group.members
                        if not m.ready and m.ready_ref is not None]
            if starting:
                ray.wait(starting, num_returns=1, timeout=timeout)
            return
        local_refs = [ref for ref in self.in_flight if isinstance(ref, LocalRef)]
        remote = [ref for ref in self.in_flight if not isinstance(ref, LocalRef)]
        done = list(local_refs)
        if remote:
            ready, _ = ray.wait(remote, num_returns=1, timeout=0 if local_refs else timeout)
            if ready:  # and whatever else is done by now
                ready, _ = ray.wait(remote, num_returns=len(remote), timeout=0)
            done += ready
        for ref in done:
            member = self.in_flight.pop(ref, None)
            if member is None:  # the other call of a worker that died: dropped with it
                continue
            stats = self.group.take(ref, member)
            if stats is MISSING:  # the worker died: its fragment is lost whole
                for other in [r for r, m in self.in_flight.items() if m is member]:
                    self.in_flight.pop(other)
                continue
            self.arrived(stats)
            if len(self.queue) >= self.queue_limit and not member.local:
                self.parked.append(member)
        # at once: the next call carries the newest weights (remote workers only; the
        # in-process one samples at the next receive, after the learner's update)
        self.start_members(local=False)

    # -- the loop's steps (core/algos/trainer.py: iterate) ------------------------------------
    def collect(self):
        """Fragments enough for one update (``--batch_size`` samples), oldest first; those too
        stale are dropped."""
        started = time.perf_counter()
        while (self.queued_samples() < self.args.batch_size
               and self.run.stop_requested is None):
            self.receive(timeout=1.0)
        wait = time.perf_counter() - started
        taken, dropped, samples = [], 0, 0
        while self.queue and samples < self.args.batch_size:
            fragment = self.queue.pop(0).stats
            if self.learner.version - fragment.weights_version > self.args.max_policy_lag:
                dropped += 1
                continue
            taken.append(fragment)
            samples += fragment.agent_stats.get("sample_rows", fragment.env_steps)
        self.start_members(local=False)  # parked workers go on once the queue has room
        return Taken(taken, dropped, wait, started,
                     min(1.0, self.run.env_steps / self.args.total_steps))

    def queued_samples(self):
        return sum(a.stats.agent_stats.get("sample_rows", a.stats.env_steps) for a in self.queue)

    def learn(self, collected):
        """``--num_epochs`` x ``--num_minibatches`` steps on the batch (``minibatch_step``),
        the minibatches whole env columns."""
        stats, grad_norms = [], []
        if not collected.fragments:
            return stats, grad_norms, [], 0
        version = self.learner.version
        policy_lags = [version - f.weights_version for f in collected.fragments]
        sharers = self.deal(collected.fragments)
        learners = 1 if sharers is None else len(sharers)
        for fragment in collected.fragments:
            fragment.data = None
        num_minibatches = min(self.args.num_minibatches,
                              sum(f.agent_stats.get("sequences", 1) for f in collected.fragments))
        for epoch in range(self.args.num_epochs):
            for minibatch in range(num_minibatches):
                request = GradientRequest(epoch, minibatch, num_minibatches, 0.0, 1.0,
                                          collected.progress, self.learner.version)
                result = self.minibatch_step(request, sharers, collected.progress)
                if result is None:
                    continue
                norm, step_stats = result
                self.faults.update_applied()
                grad_norms.append(norm)
                stats.append(step_stats)
                if self.remote_spawned:  # the next calls carry the new weights
                    self.receive(timeout=0, local=False)
        episodes = [m for f in collected.fragments for m in f.episode_metrics]
        self.episode_columns = self.model.observe_episodes(episodes) or {}
        return stats, grad_norms, policy_lags, learners

    def deal(self, fragments):
        """The learner workers that hold the batch, each a share of its env columns (the
        agent's ``split_data``; one ``adopt_data`` call each), or None when the learner
        computes alone (--num_learners 1, Ray not up yet, or one died taking its share)."""
        parts = [f.data for f in fragments]
        if self.remote_spawned and not self.args.elastic_start:  # the Ray side whole first
            while (len(self.learners.ready_members()) < self.args.num_learners > 1
                   and self.run.stop_requested is None):
                self.learners.poll(timeout=1.0)
        learners = self.learners.ready_members() if self.args.num_learners > 1 else []
        if learners:
            shares = self.agent.agent.split_data(parts, len(learners))
            adopted = self.learners.gather({self.learners.submit(m, "adopt_data", [share]): m
                                            for m, share in zip(learners, shares)})
            if len(adopted) == len(shares):
                return list(adopted)
        self.agent.agent.adopt_data(parts)
        return None

    def minibatch_step(self, request, sharers, progress):
        """One optimizer step: the gradient of this minibatch computed here (in place), or by
        the learner workers ``sharers`` on their columns and averaged by samples; (gradient
        norm, loss stats), or None when the step is skipped (no samples, NaN or inf, or every
        learner worker of the batch gone)."""
        alone = sharers is None
        if alone:
            result = self.agent.fetch_grads(request, in_place=True)
            if not result.num_samples:
                return None
            results = [result]
        else:
            weights = self.learner_placement().share(self.learner.weights_for_workers())
            answered = self.learners.gather({self.learners.submit(m, "fetch_grads", weights,
                                                                  request): m for m in sharers})
            sharers[:] = [m for m in sharers if m in answered]  # one that died leaves the batch
            results = [r for r in answered.values() if r.num_samples]
            if not results:
                return None
        counts = [r.num_samples for r in results]
        step_stats = {key: float(np.average([r.stats[key] for r in results], weights=counts))
                      for key in results[0].stats}
        if not all_finite(step_stats, LOSS_KEYS):
            self.faults.update_skipped("a loss is NaN or inf", self.run.env_steps)
            return None
        norm = (self.learner.apply_in_place(progress) if alone else
                self.learner.apply(average_gradients([r.gradients for r in results], counts),
                                   progress))
        if norm is None:
            self.faults.update_skipped("the gradient has NaN or inf", self.run.env_steps)
            return None
        return norm, step_stats

    def learner_placement(self):
        """Where the learner workers are: in this process with --num_workers 0."""
        return Placement(local=self.num_remote == 0)

    def metrics_row(self, collected, learned):
        stats, grad_norms, policy_lags, learners = learned
        fragments = collected.fragments
        returns = [x for f in fragments for x in f.episode_returns]
        lengths = [x for f in fragments for x in f.episode_lengths]
        weights = [max(1, f.env_steps) for f in fragments]
        row = {
            "iteration": self.iteration, "updates": self.learner.version,
            "train_return": float(np.mean(returns)) if returns else None,
            "train_length": float(np.mean(lengths)) if lengths else None,
            "episodes": len(returns),
            "grad_norm": float(np.mean(grad_norms)) if grad_norms else None,
            "learning_rate": shared_rate(self.model.learning_rate(collected.progress)),
            "gradient_lag": 0.0 if grad_norms else None,
            "sample_time_s": float(np.mean([f.sample_time_s for f in fragments]))
            if fragments else None,
            "update_time_s": time.perf_counter() - collected.started - collected.wait,
            "learner_wait_s": collected.wait,
            "workers": len(self.group.ready_members()),
            "policy_lag": (float(np.average(policy_lags, weights=weights)) if policy_lags
                           else None),
            "fragments": len(fragments), "dropped_fragments": collected.dropped,
            "queued_fragments": len(self.queue),
            "learners": learners or None,
            **self.faults.counts,
        }
        for key in stats[0] if stats else ():
            row[key] = float(np.mean([s[key] for s in stats]))
        row.update(getattr(self, "episode_columns", {}))
        return row

    def weights_and_version(self):
        return self.current_weights(), self.learner.version

    # -- checkpoints -------------------------------------------------------------------------
    def drain(self):
        """The fragments in flight, waited for and queued (their steps are counted, and they
        are learned after a restore as they would have been)."""
        while self.in_flight:
            self.receive_all()

    def receive_all(self):
        refs = dict(self.in_flight)
        self.in_flight = {}
        for stats in self.group.gather(refs).values():
            self.arrived(stats)

    def arrived(self, stats):
        """A fragment reached the learner: its steps, env errors and observation moments are
        counted, and it waits in the queue."""
        self.run.env_steps += stats.env_steps
        self.faults.env_errors(stats.env_errors, self.run.env_steps)
        self.merge_moments([stats])
        self.queue.append(Arrived(stats))

    def get_state(self):
        """The workers' states, the learner agent's and the fragments waiting to be learned
        (so a resumed run learns them, as the run it continues would have)."""
        self.drain()
        queue = [{"data": a.stats.data, "env_steps": a.stats.env_steps,
                  "weights_version": a.stats.weights_version,
                  "agent_stats": a.stats.agent_stats,
                  "episode_returns": list(a.stats.episode_returns),
                  "episode_lengths": list(a.stats.episode_lengths)} for a in self.queue]
        learners = self.worker_states(self.learners, self.learners.ready_members())
        return {**self.worker_states(self.group, self.group.ready_members()),
                "learner_agent": self.agent.agent.get_state(), "queue": queue,
                "learner_workers": learners["workers"],
                "learner_worker_slots": learners["worker_slots"],
                **self.statistics_state()}

    def set_state(self, state, fresh_episode_seed):
        from core.types import RolloutStats
        self.load_statistics_state(state)
        if state.get("learner_agent") is not None:
            self.agent.agent.set_state(state["learner_agent"])
        self.queue = [Arrived(RolloutStats(
            env_steps=int(q["env_steps"]), episode_returns=list(q["episode_returns"]),
            episode_lengths=list(q["episode_lengths"]),
            weights_version=int(q["weights_version"]), agent_stats=dict(q["agent_stats"]),
            data=q["data"])) for q in state.get("queue") or []]
        exact, by_slot = self.restore_worker_states(self.group, state, fresh_episode_seed)
        learner_states = dict(zip(state.get("learner_worker_slots") or [],
                                  state.get("learner_workers") or []))
        for member in self.learners.ready_members():
            saved = learner_states.pop(member.slot, None)
            if saved is not None:
                self.learners.take(self.learners.submit(member, "set_state", saved))
        if self.num_remote:
            self.pending_states = by_slot
            self.pending_learner_states = learner_states
        return exact and not self.pending_states

    def restore(self, weights, optimizer_state, updates):
        self.learner.load_state(weights, optimizer_state, updates)

    def checkpoint_state(self):
        weights, optimizer_state, version = self.learner.state()
        return weights, to_cpu(optimizer_state), version

    def summary_extra(self):
        """summary.json's ``devices``: where the learner computed (this process; with
        --num_learners N the learner workers, which compute the gradients), with CUDA's peak
        memory there (core/distributed/devices.py device_info). A learner worker that does not
        answer within 30 s is left out: the run is over, its summary must not wait on it."""
        reports = [{"role": "learner", **device_info(self.device)}]
        try:
            answered = self.learners.ask_ready("device_info", timeout=30.0)
        except Exception:  # noqa: BLE001 - a report, never the run's fate
            answered = {}
        return {"devices": reports + [{"role": f"learner worker {m.slot}", **info}
                                      for m, info in answered.items()]}

    def recording_groups(self):
        return [self.group]

    def worker_groups(self):
        return [self.group, self.learners]
