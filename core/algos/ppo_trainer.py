"""Distributed gradient-collecting PPO, elastic.

Every round: each rollout worker that is up collects a fragment with the current weights and
its agent computes advantages; then for K epochs x M minibatches, every worker that delivered a
fragment returns the gradient of the loss on its share of the minibatch, the learner averages
them (weighted by sample count) and applies one optimizer step, and the new weights go back to
the workers. With equal seeds and data it takes the same steps as one process on the union of
the data delivered: a worker that dies mid-round just leaves the union (core/sampling/worker_group.py
replaces it; the replacement joins at a later round).

Start without waiting: with Ray workers, learning begins at once in this process with an
in-process worker (the classes of --num_workers 0) while Ray and the remote workers start in
the background; each remote worker joins at the first round after its envs are built, and the
in-process worker steps out once all of them are up (--no-elastic_start waits instead).
"""
import argparse
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from core import lazy_ray
from core.lazy_ray import ray
from core.algos.agents import OnPolicyAgent
from core.distributed.devices import DRIVER_LEARNER, device_info, plan_gpus, resolve_device, to_cpu
from core.faults import all_finite
from core.learning.learner import Learner, average_gradients
from core.distributed.placement import Placement, cpus_per_actor
from core.errors import ConfigError
from core.sampling.rollout import make_rollout_worker
from core.sampling.sample_ahead import SampleAhead
from core import seeding
from core.algos.trainer import Trainer, add_reward_normalization_args
from core.algos.trainers import register_trainer
from core.argtypes import auto_or_nonnegative_int, positive_int
from core.types import GradientRequest
from core.sampling.worker_group import WorkerGroup

METRIC_COLUMNS = [
    "iteration", "env_steps", "wall_time_s", "steps_per_s", "updates", "train_return",
    "train_length", "episodes", "eval_return", "eval_return_std", "eval_success_rate",
    "eval_env_steps", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "ratio_mean",
    "grad_norm", "learning_rate", "policy_lag", "gradient_lag", "sample_time_s", "update_time_s",
    "workers", "sample_ahead", "worker_restarts", "env_errors", "skipped_updates", "recoveries",
]
LOSS_KEYS = ("policy_loss", "value_loss", "entropy")


class LearnerGradients:
    """--grad_workers 0: the learner's own agent, in this process, computes every minibatch
    gradient on the data all workers send along with their fragments, so a minibatch step is
    no call at all (with small networks and many small minibatches the calls cost more than
    the gradients: RL-Zoo's Pendulum shape, 640 steps of 64 samples per round, ran 2.5x
    longer with a call per step; BENCHMARKS.md). Its model is the learner's: the gradients
    are always those of the current weights. It stands in the round's groups like a
    gradient worker."""
    slot, local = -1, True

    def __init__(self, agent):
        self.agent = agent

    def __repr__(self):
        return "<the learner's gradients>"

    def fetch_grads(self, request, in_place=False):
        """The gradient of this minibatch on the learner's model; ``in_place``: left in the
        model's .grad (``GradientResult.gradients`` None) for ``Learner.apply_in_place``."""
        if not in_place:
            return self.agent.fetch_grads(None, request)
        with self.agent.model.gradients_in_place():
            return self.agent.fetch_grads(None, request)


@dataclass
class Round:
    """What one round collected: the fragments by worker, the weights they were sampled with
    and the times."""
    delivered: dict
    weights: object
    progress: float
    started: float
    sample_time: float
    ahead: bool          # remote workers sampled ahead this round


@dataclass
class Learned:
    """What one round's updates report."""
    stats: list = field(default_factory=list)
    grad_norms: list = field(default_factory=list)
    gradient_lags: list = field(default_factory=list)
    policy_lags: list = field(default_factory=list)
    episodes: dict = field(default_factory=dict)  # the model's observe_episodes columns


def add_args(parser):
    group = parser.add_argument_group("the PPO loop (rounds of fragments and gradients)")
    group.add_argument("--rollout_steps", type=positive_int, default=32,
                       help="steps per env in each fragment a worker collects between updates "
                            "(default: %(default)s)")
    group.add_argument("--sample_ahead", choices=["auto", "on", "off"], default="auto",
                       help="Ray workers sample their next fragment while the learner "
                            "works on the current one, so slow envs never wait for gradients "
                            "(the data are then one round of updates behind the learner, "
                            "measured in metrics.csv's policy_lag; PPO's clipping bounds it). "
                            "'auto': tried once all workers are up and kept only when it "
                            "measures faster (default: %(default)s)")
    group.add_argument("--grad_workers", type=auto_or_nonnegative_int, default="auto",
                       help="how many of the rollout workers compute the gradients of a "
                            "round, each on the fragments of several (the others send theirs "
                            "along): every minibatch step is one call to each of them, so "
                            "fewer calls per step when workers outnumber the CPUs. 0: none, "
                            "the learner computes every minibatch step itself on the data all "
                            "workers send (no call per step: for small networks and many "
                            "minibatches). The update is the same (the gradient of the "
                            "union). 'auto': one per CPU of the Ray cluster, at most "
                            "--num_workers (default: %(default)s)")
    group.add_argument("--compiled_graph", action="store_true",
                       help="run the lock-step gradient round trip as a Ray Compiled Graph "
                            "(shared-memory channels, lower overhead per minibatch step)")
    group.add_argument("--elastic_start", action=argparse.BooleanOptionalAction, default=True,
                       help="with Ray workers, learn at once in this process (an in-process "
                            "worker) while Ray and the workers start; each worker joins when "
                            "its envs are built and the in-process one steps out when all are "
                            "up (--no-elastic_start waits for the workers first) "
                            "(default: on)")
    group.add_argument("--num_epochs", type=positive_int, default=10,
                       help="K: passes over each round's data (default: %(default)s)")
    add_reward_normalization_args(group)


def slot_order(member):
    """Remote workers first (their calls overlap with the in-process one's), each kind by slot:
    the order calls are submitted and results reduced in, the same from round to round."""
    return (member.local, member.slot)


def samples(rollout):
    """Samples a fragment contributes to learning (its valid steps; its steps when each holds
    several agents' samples: agents/default_agent.py keep_per_agent)."""
    stats = rollout.agent_stats
    return stats.get("sample_rows", stats.get("advantage_count", rollout.env_steps))


def shared_rate(rate):
    """metrics.csv's learning rate: the model's, or its shared group's when it has several
    (models/ma_ppo.py --policy_args ... --lr)."""
    return rate.get("shared", next(iter(rate.values()))) if isinstance(rate, dict) else rate


def return_moments(rollouts):
    """(count, mean, variance) of the round's returns (the value targets), all workers
    together, or None when an agent does not report them."""
    stats = [r.agent_stats for r in rollouts]
    if not stats or not all("return_sum" in s for s in stats):
        return None
    count = sum(s["advantage_count"] for s in stats)
    if count == 0:
        return None
    mean = sum(s["return_sum"] for s in stats) / count
    var = max(sum(s["return_sq_sum"] for s in stats) / count - mean ** 2, 0.0)
    return float(count), float(mean), float(var)


def advantage_moments(rollouts):
    """Mean and std of the advantages of the whole rollout, all workers together."""
    stats = [r.agent_stats for r in rollouts]
    if not all("advantage_count" in s for s in stats):
        return 0.0, 1.0
    count = sum(s["advantage_count"] for s in stats)
    if count == 0:
        return 0.0, 1.0
    mean = sum(s["advantage_sum"] for s in stats) / count
    var = max(sum(s["advantage_sq_sum"] for s in stats) / count - mean ** 2, 0.0)
    return float(mean), float(np.sqrt(var))


@register_trainer("ppo")
class PPOTrainer(Trainer):
    """Gradient-collecting PPO: workers collect fragments and compute minibatch gradients, the
    learner averages and applies them, lock-step rounds (the module's docstring)."""
    has_reward_normalization = True
    metric_columns = METRIC_COLUMNS
    line_metrics = (("policy_loss", "pi", ".3f"), ("value_loss", "vf", ".3f"),
                    ("entropy", "ent", ".3f"), ("approx_kl", "kl", ".4f"))
    add_args = staticmethod(add_args)
    #: learning can start before Ray is up (ddrl/session.py starts it in the background)
    starts_without_ray = True
    agent_kind = OnPolicyAgent

    @classmethod
    def learns_while_ray_starts(cls, args):
        """The stand-in worker learns in the driver until the Ray workers are up, unless
        --no-elastic_start or a compiled graph (built over every worker) waits for them."""
        return (super().learns_while_ray_starts(args) and args.elastic_start
                and not args.compiled_graph)

    @classmethod
    def gpu_plan(cls, args):
        """The rollout workers compute the gradients (core/distributed/devices.py), unless
        --grad_workers 0: then the driver's learner computes them all and takes the GPU."""
        if getattr(args, "grad_workers", "auto") == 0:
            return plan_gpus(DRIVER_LEARNER, args.num_gpus, args.num_workers)
        return super().gpu_plan(args)

    @classmethod
    def check_plugins(cls, plugins, spec):
        """A model that learns from minibatches of its own kind (``batch_type``: RND's carry
        intrinsic returns, models/ppo_rnd.py) needs an agent that makes that kind (the same
        ``batch_type``), and such an agent needs such a model."""
        model_cls, agent_cls = plugins.model_cls, plugins.agent_cls
        wanted, made = (getattr(model_cls, "batch_type", None),
                        getattr(agent_cls, "batch_type", None))
        if wanted is not made:
            takes = f"takes {wanted.__name__} minibatches" if wanted else "takes PPO's minibatches"
            makes = f"makes {made.__name__} minibatches" if made else "makes PPO's minibatches"
            raise ConfigError(
                f"model {model_cls.__name__} {takes}, but agent {agent_cls.__name__} {makes}. "
                f"Drop --agent_name to use the model's own agent ({model_cls.default_agent}), "
                f"or pick a model and agent that go together (ppo_rnd with rnd_agent).")

    @classmethod
    def metric_columns_for(cls, model_cls, observation_space=None):
        """The loop's columns, then the statistics a model's updates report that PPO's do not
        (BaseModel.update_metrics: models/pqn.py's Q loss and epsilon), then the model's
        episode columns (models/base.py observe_episodes, metric_columns_of)."""
        columns = list(cls.metric_columns)
        for column in (*model_cls.update_metrics, *model_cls.metric_columns_of(observation_space)):
            if column not in columns:
                columns.append(column)
        return columns

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        super().__init__(args, spec, plugins, spaces, run, faults, ray_starter)
        self.num_remote = args.num_workers
        # Weights travel inline or by reference once Ray is up; in-process as they are.
        self.placement = Placement(local=True)
        self.group = WorkerGroup("rollout worker", self.make_worker, faults,
                                 lambda: run.env_steps, timeout=args.worker_timeout)
        self.pending_states = {}           # slot -> saved worker state, applied when it joins
        torch.manual_seed(args.seed)
        self.model = plugins.model_cls(spec.model, *spaces)
        # The learner stays on the CPU (its optimizer step takes ~0.1 ms) while the workers
        # compute the gradients, on their GPU shares if any; with --grad_workers 0 it computes
        # them all itself, on the GPU when the run has one (core/distributed/devices.py).
        self.device = resolve_device(spec.gpus.driver_learner_gpus if spec.gpus else 0.0,
                                     "the learner")
        self.model.to(self.device)  # before the optimizer: its state lives beside the weights
        self.learner = Learner(self.model)
        self.learner_gradients = None
        if args.grad_workers == 0:
            agent_cls = plugins.agent_cls
            if agent_cls.adopt_data is OnPolicyAgent.adopt_data:
                raise ConfigError(
                    f"--grad_workers 0 (the learner computes the gradients on the data every "
                    f"worker sends) needs an agent that can take other agents' data: "
                    f"{agent_cls.__name__} (--agent_name {args.agent_name}) does not define "
                    f"adopt_data. Use --grad_workers auto or a number >= 1.")
            own_agent = agent_cls(spec.agent, self.model, seed=seeding.learner_agent(args.seed))
            self.learner_gradients = LearnerGradients(own_agent)
        self.num_epochs = args.num_epochs
        self.sample_ahead = SampleAhead(args.sample_ahead, quiet=args.quiet)
        self.graph = None
        if self.num_remote == 0:
            self.group.add(0, local=True)  # --num_workers 0: the deterministic mode
        elif self.learns_while_ray_starts(args):
            # Learn in the driver until the remote workers are built, whether Ray is still
            # starting or already up (joining --address is quick, but each worker then waits
            # for the job's code to reach its node: ~10 s measured on the loopback cluster).
            # The stand-in gets a slot of its own: seeds distinct from every remote worker's.
            # (Env actors need Ray: with --env_placement actor the run waits for it.)
            self.group.add(self.num_remote, local=True)
        else:
            self.ray_starter.ready(timeout=None)
        self.remote_spawned = False
        self.spawn_remote()
        if self.num_remote and (not args.elastic_start or args.compiled_graph):
            self.wait_for_every_worker()
        self.evaluations.prepare()
        # (the graph is a gradient round trip to every worker: not when the learner computes)
        if args.compiled_graph and self.num_remote and self.learner_gradients is None:
            self.graph = self.compile_graph()

    # -- membership --------------------------------------------------------------------------
    def remote_evaluation(self):
        """The test worker moves to Ray together with the rollout workers (the weights are
        shared for Ray from that round on), not at the moment Ray happens to be up."""
        return self.remote_spawned

    def ray_up(self):
        return self.ray_starter is not None and self.ray_starter.ready()

    def make_worker(self, slot, generation, local, node=None):
        # On a small machine more workers than CPUs would leave actors unscheduled: share.
        return make_rollout_worker(self.spec, slot, generation, local,
                                   cpus_per_actor(self.num_remote), node)

    def spawn_remote(self):
        """Once Ray is up, start the remote workers (they join when their envs are built)."""
        if self.remote_spawned or not self.num_remote or not self.ray_up():
            return
        self.remote_spawned = True
        self.placement = Placement(local=False)
        for slot in range(self.num_remote):
            self.group.add(slot)
        self.evaluations.prepare()

    def wait_for_every_worker(self):
        """--no-elastic_start (and a compiled graph, built over every worker): the first round
        waits until every remote worker is up, a replacement of one that died while starting
        included. Before, rounds began as soon as one was up, so how many workers the first
        rounds had, and so the run's data, depended on which process happened to start first."""
        while not all(m.ready for m in self.group.remote_members()):
            self.group.poll(timeout=1.0)

    def update_membership(self):
        """Start what Ray allows, let in the workers that finished starting (with their saved
        state after a restore), and retire the stand-in when every remote worker is up."""
        self.spawn_remote()
        if not self.remote_spawned:
            return
        joined = self.group.poll(timeout=0 if self.group.ready_members() else 1.0)
        for member in joined:
            state = self.pending_states.pop(member.slot, None)
            if state is not None and member.generation == 0:
                ray.get(member.handle.set_state.remote(state, None))
        remote_ready = [m for m in self.group.remote_members() if m.ready]
        local = [m for m in self.group.members if m.local]
        if local and len(remote_ready) == self.num_remote:
            for member in local:
                self.group.retire(member)
            if not self.args.quiet:
                print(f"ddrl: {self.num_remote} Ray workers up at env step "
                      f"{self.run.env_steps:,} ({self.run.elapsed():.1f} s); the in-process "
                      f"worker steps out", flush=True)

    # -- gradients ---------------------------------------------------------------------------
    def gradients(self, weights, request, members):
        """{member: GradientResult} of the workers still in this round. When the learner's
        own agent computes alone (--grad_workers 0), its gradient stays in the model's .grad
        (``gradients`` None): ``update`` applies it in place."""
        if self.graph is not None:
            try:
                return dict(zip(members, ray.get(self.graph.execute(weights, request),
                                                 timeout=self.args.worker_timeout)))
            except Exception:  # noqa: BLE001 - a worker died under the graph: plain calls
                self.graph.teardown()
                self.graph = None
                self.group.poll(timeout=0)
        calls, own = {}, None
        for member in sorted(members, key=slot_order):  # remote first: they overlap
            if member is self.learner_gradients:
                continue
            calls[self.group.submit(member, "fetch_grads", weights, request)] = member
        if self.learner_gradients in members:
            own = self.learner_gradients.fetch_grads(request, in_place=len(members) == 1)
        results = self.group.gather(calls) if calls else {}
        if own is not None:
            results[self.learner_gradients] = own
        return results

    def compile_graph(self):
        """--compiled_graph: the lock-step gradient round trip as a Ray Compiled Graph, whose
        shared-memory channels replace a task submission per worker and step (measured: 0.74
        ms per round trip to two actors, against about 2.3 ms with ordinary calls). If a worker
        dies the graph is torn down and the run goes on with ordinary calls."""
        from ray.dag import InputNode, MultiOutputNode
        with InputNode() as request:
            dag = MultiOutputNode([m.handle.fetch_grads.bind(request[0], request[1])
                                   for m in self.group.ready_members()])
        return dag.experimental_compile()

    def wait_for_members(self):
        """The workers that are up; if none is (all died, or still starting), wait for one."""
        self.update_membership()
        members = self.group.ready_members()
        while not members and self.run.stop_requested is None:
            self.update_membership()
            members = self.group.ready_members()
        return members

    def collect_fragments(self, members, weights, progress=None):
        """One fragment from every worker in ``members``: {member: RolloutStats}. Remote
        workers sample ahead when --sample_ahead says so (the in-process one never: it would
        compete with the learner in this very process, and --num_workers 0 is the
        deterministic mode). Workers that will not compute gradients this round send their
        agent's data along (see ``pool``). ``progress`` (the run's env steps over
        --total_steps) goes to each worker's model for ``begin_fragment`` (an exploration
        schedule's clock: models/pqn.py)."""
        ahead = self.sample_ahead.active()
        computing = set(self.planned_grad_workers(members))
        calls = {}
        for member in sorted(members, key=slot_order):  # remote first: they overlap
            ref = self.group.submit(member, "collect", weights, self.learner.version,
                                    self.args.rollout_steps, self.obs_statistics(),
                                    ahead and not member.local, member not in computing,
                                    progress=progress, reward_scaling=self.reward_scaling())
            calls[ref] = member
        return self.group.gather(calls)

    # -- gradient workers ----------------------------------------------------------------------
    def grad_worker_count(self, members):
        """--grad_workers: 'auto' is one per CPU of the Ray cluster (a minibatch step is one
        call to each gradient worker: more of them than CPUs only adds calls), at most all."""
        wanted = self.args.grad_workers
        if self.learner_gradients is not None:
            return 0  # --grad_workers 0: the learner computes them (see pool)
        if self.graph is not None:
            return len(members)  # a compiled graph is built over every worker
        if wanted == "auto":
            wanted = max(1, int(ray.cluster_resources().get("CPU", 1))
                         if lazy_ray.initialized() else 1)
        return min(len(members), wanted)

    def planned_grad_workers(self, members):
        """The workers meant to compute this round's gradients: the first by slot, remote
        ones before the in-process stand-in (stable from round to round)."""
        return sorted(members, key=slot_order)[:self.grad_worker_count(members)]

    def pool(self, delivered):
        """{gradient worker: [the members whose data it computes on]}. The planned gradient
        workers that delivered take the data the others exported, balanced by sample count
        (one ``absorb`` call each); when none of them delivered, the first exporter computes
        on its own data instead. A worker whose agent cannot share its data (export_data
        returns None) computes on its own. A gradient worker that dies while absorbing leaves
        the round with its group's data."""
        planned = [m for m in self.planned_grad_workers(list(delivered)) if m in delivered]
        groups = {m: [m] for m in delivered if m in planned or delivered[m].data is None}
        exported = sorted((m for m in delivered if m not in groups),
                          key=lambda m: -samples(delivered[m]))
        if self.learner_gradients is not None:  # --grad_workers 0: the learner takes them all
            if exported:
                self.learner_gradients.agent.adopt_data([delivered[m].data for m in exported])
                groups[self.learner_gradients] = exported
            for stats in delivered.values():
                stats.data = None
            return groups
        if exported and not groups:  # no planned gradient worker delivered
            first = exported.pop(0)
            groups[first] = [first]
        leaders = [m for m in groups if m in planned] or list(groups)
        load = {m: samples(delivered[m]) for m in leaders}
        for member in exported:
            leader = min(load, key=load.get)
            groups[leader].append(member)
            load[leader] += samples(delivered[member])
        calls = {self.group.submit(leader, "absorb", [delivered[m].data for m in group[1:]]):
                 leader for leader, group in groups.items() if len(group) > 1}
        absorbed = self.group.gather(calls) if calls else {}
        for stats in delivered.values():
            stats.data = None  # held by the gradient workers now
        return {leader: group for leader, group in groups.items()
                if len(group) == 1 or leader in absorbed}

    def all_remote_up(self, delivered):
        """Every worker of the run remote, up and in this round (what a fair comparison of
        sampling ahead against plain sampling needs)."""
        return (self.num_remote > 0 and len(delivered) == self.num_remote
                and not any(m.local for m in delivered))

    # -- the loop's steps (core/algos/trainer.py: iterate) ------------------------------------
    def collect(self):
        """One fragment from every worker that is up (waiting for one if none is)."""
        members = self.wait_for_members()
        started = time.perf_counter()
        progress = min(1.0, self.run.env_steps / self.args.total_steps)
        weights = self.placement.share(self.learner.weights_for_workers())
        delivered = self.collect_fragments(members, weights, progress)
        rollouts = list(delivered.values())
        self.run.env_steps += sum(r.env_steps for r in rollouts)
        for r in rollouts:
            self.faults.env_errors(r.env_errors, self.run.env_steps)
        self.merge_moments(rollouts)
        # (the in-process worker never samples ahead)
        ahead = self.sample_ahead.active() and any(not m.local for m in delivered)
        return Round(delivered, weights, progress, started, time.perf_counter() - started,
                     ahead)

    def learn(self, collected):
        """K epochs x M minibatch steps on the round's data (``update``)."""
        learned = Learned(*self.update(collected.delivered, collected.weights,
                                       collected.progress))
        # The round's finished episodes, told to the learner's model after its updates: what
        # it keeps of them (a self-play pool's ratings) goes out with the next weights.
        moments = return_moments(list(collected.delivered.values()))
        observe_returns = getattr(self.model, "observe_returns", None)
        if moments is not None and observe_returns is not None:  # PPO's --value_norm
            observe_returns(*moments)
        episodes = [m for r in collected.delivered.values() for m in r.episode_metrics]
        learned.episodes = {
            **(self.model.observe_round([r.agent_stats for r in collected.delivered.values()])
               or {}),
            **(self.model.observe_episodes(episodes) or {})}
        self.sample_ahead.record(sum(r.env_steps for r in collected.delivered.values()),
                                 self.all_remote_up(collected.delivered))
        return learned

    def end(self):
        """Nothing runs between rounds; the compiled graph goes (its actors take ordinary calls
        again, the final checkpoint's get_state among them)."""
        if self.graph is not None:
            self.graph.teardown()
            self.graph = None

    def update(self, delivered, weights, progress):
        """K epochs x M minibatch steps on the data the workers in ``delivered`` hold, computed
        by the gradient workers (``pool``); a gradient worker that dies leaves the round with
        its group's data, the others go on. A step whose loss or averaged gradient is not
        finite is skipped (core/faults.py counts it)."""
        rollouts = list(delivered.values())
        num_minibatches = max(1, round(sum(samples(r) for r in rollouts)
                                       / self.args.batch_size))
        mean, std = advantage_moments(rollouts)
        groups = self.pool(delivered)
        # An agent that learns on sequences (a recurrent model) says how many it holds. Each
        # gradient worker splits its own into the minibatches: no more minibatches than the
        # fewest any of them holds, so that each has a share of every one (long fragments in
        # small batches take fewer, larger minibatches, never empty ones).
        held = [[delivered[m].agent_stats.get("sequences") for m in group]
                for group in groups.values()]
        if held and all(n is not None for group in held for n in group):
            num_minibatches = max(1, min(num_minibatches, min(sum(group) for group in held)))
        members = list(groups)
        stats, grad_norms, gradient_lags = [], [], []
        # Policy lag (one meaning in both loops, core/algos/trainer.py): updates between the weights
        # that acted each fragment (the version its model really held) and the learner's when
        # the fragment enters learning, here this round's first update; sample-weighted.
        policy_lags = [float(np.average([self.learner.version - r.weights_version
                                         for r in rollouts],
                                        weights=[max(1, r.env_steps) for r in rollouts]))
                       ] if rollouts else []
        # the losses a NaN skips the update for: PPO's, and those the model reports of its own
        loss_keys = LOSS_KEYS + tuple(type(self.model).update_metrics)
        for epoch in range(self.num_epochs):
            for minibatch in range(num_minibatches):
                if not members:
                    return stats, grad_norms, gradient_lags, policy_lags
                request = GradientRequest(epoch, minibatch, num_minibatches, mean, std,
                                          progress, self.learner.version)
                results = self.gradients(weights, request, members)
                members = [m for m in members if m in results]
                if not results:
                    continue
                results = list(results.values())
                if not sum(r.num_samples for r in results):
                    continue  # no worker had data for this minibatch: nothing to learn from
                gradient_lags += [self.learner.version - r.weights_version for r in results]
                step_stats = [r.stats for r in results]
                if not all(all_finite(s, loss_keys) for s in step_stats):
                    self.faults.update_skipped("a loss is NaN or inf", self.run.env_steps)
                    continue
                if results[0].gradients is None:  # the learner's own, left in place
                    norm = self.learner.apply_in_place(progress)
                else:
                    norm = self.learner.apply(average_gradients(
                        [r.gradients for r in results], [r.num_samples for r in results]),
                        progress)
                if norm is None:
                    self.faults.update_skipped("the averaged gradient has NaN or inf",
                                               self.run.env_steps)
                    continue
                self.faults.update_applied()
                grad_norms.append(norm)
                if any(m is not self.learner_gradients for m in members):
                    weights = self.placement.share(self.learner.weights_for_workers())
                stats += step_stats
        return stats, grad_norms, gradient_lags, policy_lags

    def summary_extra(self):
        """What summary.json gets from this loop: what --sample_ahead auto measured, and where
        the gradients were computed (``devices``)."""
        found = self.sample_ahead.summary()
        return {**({"sample_ahead": found} if found else {}), "devices": self.device_reports()}

    def device_reports(self):
        """Each worker that is up now (the learner's own agent with --grad_workers 0): where
        it computed its gradients, with CUDA's peak memory there (core/distributed/devices.py
        device_info). Workers that do not answer within 30 s are left out: the run is over,
        its summary must not wait on them."""
        reports = []
        if self.learner_gradients is not None:
            model = self.learner_gradients.agent.model
            reports.append({"role": "learner", **device_info(getattr(model, "device", "cpu"))})
        try:
            answered = self.group.ask_ready("device_info", timeout=30.0, order=slot_order)
        except Exception:  # noqa: BLE001 - a report, never the run's fate
            return reports
        return reports + [{"role": f"rollout worker {m.slot}" + (" (in-process)" if m.local
                                                                 else ""), **info}
                          for m, info in answered.items()]

    def weights_and_version(self):
        return self.placement.share(self.learner.weights_for_workers()), self.learner.version

    def metrics_row(self, collected, learned):
        rollouts = list(collected.delivered.values())
        stats, grad_norms, gradient_lags = (learned.stats, learned.grad_norms,
                                            learned.gradient_lags)
        episode_returns = [x for r in rollouts for x in r.episode_returns]
        episode_lengths = [x for r in rollouts for x in r.episode_lengths]
        row = {
            "iteration": self.iteration, "updates": self.learner.version,
            "train_return": float(np.mean(episode_returns)) if episode_returns else None,
            "train_length": float(np.mean(episode_lengths)) if episode_lengths else None,
            "episodes": len(episode_returns),
            "grad_norm": float(np.mean(grad_norms)) if grad_norms else None,
            "learning_rate": shared_rate(self.model.learning_rate(
                min(1.0, self.run.env_steps / self.args.total_steps))),
            # updates between the weights a gradient was computed with (the version the
            # computing model held) and the learner's when it was applied; mean over the round
            "gradient_lag": float(np.mean(gradient_lags)) if gradient_lags else None,
            "sample_time_s": collected.sample_time,
            "update_time_s": time.perf_counter() - collected.started - collected.sample_time,
            "workers": len(rollouts),
            "policy_lag": (float(np.mean(learned.policy_lags)) if learned.policy_lags
                           else None),
            "sample_ahead": int(collected.ahead),
            **self.faults.counts,
        }
        for key in stats[0] if stats else ():
            row[key] = float(np.mean([s[key] for s in stats]))
        row.update(learned.episodes)
        return row

    # -- checkpoints -------------------------------------------------------------------------
    def get_state(self):
        """The states of the workers that are up (core/sampling/rollout.py:RolloutWorker.get_state),
        by slot, and the observation normalizer."""
        own = ({"learner_agent": self.learner_gradients.agent.get_state()}
               if self.learner_gradients is not None else {})
        return {**self.worker_states(self.group, self.group.ready_members()), **own,
                **self.statistics_state()}

    def set_state(self, state, fresh_episode_seed):
        """Hand every worker its saved state (a remote worker when it joins). Returns True if
        every worker that is up now continues its episodes exactly."""
        self.load_statistics_state(state)
        if self.learner_gradients is not None and state.get("learner_agent") is not None:
            self.learner_gradients.agent.set_state(state["learner_agent"])
        exact, by_slot = self.restore_worker_states(self.group, state, fresh_episode_seed)
        if self.num_remote:
            self.pending_states = by_slot  # applied when the remote workers join
        return exact and not self.pending_states

    def restore(self, weights, optimizer_state, updates):
        """Continue from a checkpoint: the learner's weights, optimizer state and version."""
        self.learner.load_state(weights, optimizer_state, updates)

    def checkpoint_state(self):
        weights, optimizer_state, version = self.learner.state()
        return weights, to_cpu(optimizer_state), version  # loads where no GPU is

    def recording_groups(self):
        return [self.group]

    def worker_groups(self):
        return [self.group]
