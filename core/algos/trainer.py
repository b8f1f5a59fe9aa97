"""The Trainer base class: the one loop skeleton every training loop fills in, and the contract
ddrl/session.py calls.

A trainer drives one run: it owns the worker groups (core/sampling/worker_group.py), the evaluation
schedule (core/sampling/eval_runner.py), the observation normalizer, and its part of checkpoints.
The session (ddrl/session.py) owns the loop around it, in one direction: it builds the
trainer, restores it, then

    trainer.begin()
    while True:
        iteration = trainer.iterate()        # collect -> learn -> evaluate: one metrics row
        ... the session records the row, saves best.pt and periodic checkpoints, stops ...
    trainer.end()                            # work in flight settled (also after an error)
    trainer.last_evaluation()                # the evaluation still running, waited for

and checkpoints only between iterations (``drain``, ``checkpoint_state``, ``get_state``). A
trainer never calls back into the session: when a part of the loop that holds state dies (SAC's
replay buffer or parameter server), it raises ``LoopPartLost`` and the session hands it the
newest checkpoint (``recover``).

``iterate`` is a template (SB3's ``learn()``/``train()`` split): ``collect()`` -> ``learn(collected)``
-> ``evaluate()`` -> ``metrics_row(collected, learned)``. A lock-step loop (PPO's, the REINFORCE
example's) fills in the steps; a loop whose steps overlap (SAC's, Ape-X shape: collection and
updates run at once on different actors) overrides ``iterate`` itself. The built-in loops are
PPO's (core/algos/ppo_trainer.py, gradient-collecting) and SAC's (core/algos/replay_trainer.py). A
plugin brings its own by subclassing Trainer and registering it (core/algos/trainers.py
``register_trainer``); its model names it (``trainer = "..."``).

Class attributes: ``metric_columns`` (metrics.csv's columns, in order; a row may leave any
empty), ``add_args(parser)`` (the loop's own flags), ``starts_without_ray`` (learning can begin
in this process while Ray starts; ``learns_while_ray_starts(args)`` says whether a given run
does), ``agent_kind`` (the agent contract the loop calls).

Two metrics mean the same in every loop, and are measured from the versions that really took
part: weights handed out by a learner carry its update count (core/types.py
WEIGHTS_VERSION_KEY), a model that loads them keeps it, and what the model computes reports it.

- ``gradient_lag``: updates between the weights a gradient was computed with and the weights it
  was applied to; the mean over the row's updates (0 in lock-step; 1 with SAC's --update_lag 1
  and learner workers).
- ``policy_lag``: updates between the weights that acted a sample and the learner's when that
  sample entered learning (PPO: the round's first update; SAC: the update count booked when its
  fragment reached the replay buffer); the mean over the row's samples.
"""
import argparse
from dataclasses import dataclass
from typing import Optional

from core.argtypes import positive_float
from core.distributed.devices import ROLLOUT_WORKERS, plan_gpus
from core.errors import ConfigError
from core.learning.normalizer import ObsNormalizer, RewardNormalizer
from core.sampling.eval_runner import EvalRunner


@dataclass
class Iteration:
    """What one iteration gives the session: a metrics row (the run adds the env steps, times
    and evaluation columns) and the evaluation that finished during it, if one did."""
    row: dict
    evaluation: Optional[dict] = None


class LoopPartLost(RuntimeError):
    """A part of the loop that holds state died (SAC: the replay buffer, the parameter server):
    the session answers with ``Trainer.recover(lost, newest checkpoint)``."""


class Trainer:
    #: metrics.csv's columns, in order
    metric_columns = ()
    #: learning can start in this process before Ray is up (ddrl/session.py starts it in the
    #: background)
    starts_without_ray = False
    #: the loop has --normalize_reward (``add_reward_normalization_args``): its rollout
    #: workers' fragments are learned as they come, so their rewards can be scaled there
    has_reward_normalization = False
    #: the agent contract this loop calls (core/algos/agents.py); the session refuses another kind
    agent_kind = None
    #: who computes the gradients, which decides where GPUs go (core/distributed/devices.py):
    #: the rollout workers on their own fragments, or learner actors fed from replay
    updates_computed_by = ROLLOUT_WORKERS

    @classmethod
    def learns_while_ray_starts(cls, args):
        """Whether this run learns in this process while Ray starts in the background. Only
        then does ddrl/session.py start Ray's processes niced, to leave the CPUs to that
        learning; a run that waits for Ray (a flag such as --no-elastic_start, or envs in
        actors of their own, which need Ray before the first worker) starts them at the
        driver's niceness, since Ray's processes keep theirs for the whole run."""
        return cls.starts_without_ray and args.env_placement == "worker"

    @classmethod
    def metric_columns_for(cls, model_cls, observation_space=None):
        """metrics.csv's columns for a run of ``model_cls`` on ``observation_space`` (a loop may
        add the statistics the model's updates report, BaseModel.update_metrics, and what it
        keeps of the episodes, BaseModel.metric_columns_of)."""
        return list(cls.metric_columns)

    #: the loop's own columns on the terminal line, (column, label, format), before the model's
    line_metrics = ()

    @classmethod
    def line_metrics_for(cls, model_cls):
        """What a terminal line shows after the returns: the evaluation's success rate, the
        loop's columns, the model's (BaseModel.line_metrics), the policy lag."""
        return ((("eval_success_rate", "success", ".2f"),) + tuple(cls.line_metrics)
                + tuple(model_cls.line_metrics) + (("policy_lag", "lag", ".1f"),))

    @classmethod
    def check_plugins(cls, plugins, spec):
        """Refuse, as a ConfigError, plugins this loop cannot drive with these configs (before
        anything starts)."""

    def start_note(self):
        """What the run's first line adds about this loop (e.g. SAC's update precision)."""
        return ""

    @classmethod
    def for_run(cls, args):
        """The loop class that drives a run with these flags (``args``: the loop's config): this
        one, or a variant of it (the replay loop's offline form for --dataset)."""
        return cls

    @classmethod
    def fine_tunes_from(cls, args, saved):
        """Whether --restore of a run saved with config ``saved`` (its flags, a dict) starts a
        new run of this loop from its weights (offline to online) rather than continuing it."""
        return False

    @classmethod
    def spaces_without_env(cls, args):
        """(observation space, action space) of a run with no env to step (--env_name none),
        from this loop's own source of experience; only the offline loop has one."""
        raise ConfigError(
            "--env_name none names no env, and this run's loop learns by stepping one: only an "
            "offline run trains without an env (--dataset PATH with --offline_ratio 1, and a "
            "model of the replay loop: bc, iql, cql, cql_discrete, td3_bc). Give an env "
            "(--env_name, e.g. gym_env with --gym_id) or a dataset.")

    @classmethod
    def gpu_plan(cls, args):
        """GPUs per kind of actor for a run with ``args`` (--num_gpus, --num_workers)."""
        return plan_gpus(cls.updates_computed_by, args.num_gpus, args.num_workers)

    @staticmethod
    def add_args(parser):
        """Add this loop's own flags to ``parser``."""

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        """``spec``: the plugin names and flags workers rebuild the plugins from
        (core/plugins.py); ``plugins``: the classes; ``spaces``: (observation space, action
        space); ``run``: the run's counters, metrics and stop flag (core/run/context.py); ``faults``:
        the fault counters (core/faults.py); ``ray_starter``: Ray starting in the background,
        None when the run has no Ray workers (core/distributed/placement.py)."""
        self.args, self.spec, self.plugins, self.spaces = args, spec, plugins, spaces
        self.run, self.faults, self.ray_starter = run, faults, ray_starter
        self.obs_normalizer = (ObsNormalizer(spaces[0], clip=args.obs_clip)
                               if args.normalize_obs else None)
        self.reward_normalizer = (RewardNormalizer(agent_gamma(spec), clip=args.reward_clip)
                                  if self.has_reward_normalization and args.normalize_reward
                                  else None)
        self.iteration = 0
        self.evaluations = EvalRunner(spec, run, faults, self.remote_evaluation)

    # -- the loop, as the session calls it ---------------------------------------------------
    def begin(self):
        """Before the first iteration, after any restore: start the schedules from the run's
        counters."""
        self.evaluations.begin()

    def iterate(self):
        """One iteration: collect -> learn -> evaluate; returns an ``Iteration``."""
        self.iteration += 1
        collected = self.collect()
        learned = self.learn(collected)
        evaluation = self.evaluate()
        return Iteration(self.metrics_row(collected, learned), evaluation)

    def end(self):
        """After the last iteration, however the loop ended: settle the work in flight so that
        the final checkpoint can be taken."""
        self.drain()

    def last_evaluation(self):
        """The evaluation still running when the loop stopped, waited for (it counts), or None."""
        return self.evaluations.finish()

    def recover(self, lost, checkpoint):
        """Rebuild after ``LoopPartLost`` from ``checkpoint`` (the session's newest: (weights,
        optimizer state, updates, meta, state), or None). A loop without such parts never
        raises it."""
        raise lost

    # -- the steps of ``iterate`` ------------------------------------------------------------
    def collect(self):
        """Gather experience; returns whatever ``learn`` and ``metrics_row`` take."""
        raise NotImplementedError

    def learn(self, collected):
        """Update the learner on ``collected``; returns what ``metrics_row`` reports of it."""
        raise NotImplementedError

    def evaluate(self):
        """Start an evaluation when one is due; the result of one that finished, or None."""
        return self.evaluations.poll(self.weights_and_version, self.obs_statistics())

    def metrics_row(self, collected, learned):
        """The metrics row of this iteration (columns of ``metric_columns``)."""
        raise NotImplementedError

    def weights_and_version(self):
        """The learner's weights as workers take them, and their version (update count)."""
        raise NotImplementedError

    def remote_evaluation(self):
        """Whether the test worker may be a Ray actor now (else it runs in this process)."""
        return False

    def worker_groups(self):
        """The loop's WorkerGroups (close() retires their members)."""
        return []

    def recording_groups(self):
        """The WorkerGroups of rollout workers (--record_dataset: each records a shard)."""
        return []

    def close_recorders(self):
        """--record_dataset: every rollout worker writes its shard whole (after ``end``)."""
        for group in self.recording_groups():
            group.gather({group.submit(m, "close_recorder"): m for m in group.members},
                         timeout=None)

    def close(self):
        for group in self.worker_groups():
            for member in list(group.members):
                group.retire(member)

    def summary_extra(self):
        """What summary.json gets from this loop besides the run's counters."""
        return {}

    # -- observation normalization (--normalize_obs) -----------------------------------------
    def obs_statistics(self):
        """(mean, var) to hand to workers and the test worker, or None."""
        return None if self.obs_normalizer is None else self.obs_normalizer.statistics()

    def reward_scaling(self):
        """(the run's return Moments, gamma, clip) of --normalize_reward to hand to workers with
        a fragment, or None."""
        return None if self.reward_normalizer is None else self.reward_normalizer.scaling()

    def merge_moments(self, rollout_stats):
        """The fragments' observation and return moments into the run's statistics."""
        if self.obs_normalizer is not None and not self.obs_normalizer.frozen:
            for stats in rollout_stats:
                self.obs_normalizer.update(stats.obs_moments)
        if self.reward_normalizer is not None:
            for stats in rollout_stats:
                self.reward_normalizer.update(stats.return_moments)

    # -- checkpoints -------------------------------------------------------------------------
    def drain(self):
        """Finish or book the work in flight, so that a checkpoint describes one moment."""

    def checkpoint_state(self):
        """(weights, optimizer state, updates) of the learner, as plain tensors and numbers."""
        raise NotImplementedError

    def restore(self, weights, optimizer_state, updates):
        """Continue from a checkpoint's learner state."""
        raise NotImplementedError

    def get_state(self):
        """The run state besides the learner's, as plain data (core/run/state.py checks it): by
        default the normalizers' statistics."""
        return self.statistics_state()

    def set_state(self, state, fresh_episode_seed):
        """Apply ``get_state()``'s dict from a checkpoint; True if the run continues exactly
        (every worker's episodes and random generators as they were)."""
        self.load_statistics_state(state)
        return False

    def statistics_state(self):
        """What evaluating needs, and --normalize_reward's statistics (which only learning
        needs)."""
        return {**self.evaluation_state(),
                **({} if self.reward_normalizer is None
                   else {"reward_normalizer": self.reward_normalizer.state_dict()})}

    def load_statistics_state(self, state):
        self.load_evaluation_state(state)
        if self.reward_normalizer is not None and state.get("reward_normalizer") is not None:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])

    def evaluation_state(self):
        """What evaluating the weights needs besides them (the normalizer's statistics)."""
        return ({} if self.obs_normalizer is None
                else {"obs_normalizer": self.obs_normalizer.state_dict()})

    def load_evaluation_state(self, state):
        if self.obs_normalizer is not None and state.get("obs_normalizer") is not None:
            self.obs_normalizer.load_state_dict(state["obs_normalizer"])

    # -- helpers for loops with rollout workers ----------------------------------------------
    @staticmethod
    def worker_states(group, members):
        """{"workers": [state, ...], "worker_slots": [slot, ...]} of ``members`` of ``group``
        (their get_state, gathered in one wait; a member that dies meanwhile is left out)."""
        states = group.gather({group.submit(m, "get_state"): m for m in members})
        kept = sorted((m for m in members if m in states), key=lambda m: m.slot)
        return {"workers": [states[m] for m in kept], "worker_slots": [m.slot for m in kept]}

    def restore_worker_states(self, group, state, fresh_episode_seed):
        """Hand each ready member of ``group`` its saved state from ``state`` (``worker_states``'
        dict); returns (whether every ready member continues exactly, {slot: state} of the
        slots not up yet, to apply when they join). A member without a saved state starts
        fresh episodes."""
        from core import seeding
        by_slot = self.saved_worker_states(state)
        exact = bool(by_slot)
        for member in group.ready_members():
            if member.slot in by_slot:
                seed = seeding.resumed_worker(fresh_episode_seed, member.slot)
                exact &= bool(group.take(group.submit(member, "set_state",
                                                      by_slot.pop(member.slot), seed)))
            else:
                exact = False
        return exact, by_slot

    @staticmethod
    def saved_worker_states(state):
        """{slot: worker state} from a checkpoint's ``worker_states`` entry."""
        saved = state.get("workers") or []
        slots = state.get("worker_slots") or list(range(len(saved)))
        return dict(zip(slots, saved))


def add_reward_normalization_args(group):
    """--normalize_reward and --reward_clip, for the loops whose rollout workers feed learning
    from fragments (PPO's, APPO's)."""
    group.add_argument("--normalize_reward", action=argparse.BooleanOptionalAction,
                       default=False,
                       help="learn from rewards divided by the running standard deviation of "
                            "the discounted return (with the agent's --gamma), its statistics "
                            "merged across workers and saved in checkpoints, as SB3's "
                            "VecNormalize(norm_reward=True) and CleanRL's NormalizeReward: for "
                            "envs whose rewards are far from unit scale (MuJoCo). Returns in "
                            "the log and evaluations stay the env's (default: off)")
    group.add_argument("--reward_clip", type=positive_float, default=10.0,
                       help="with --normalize_reward, clip scaled rewards to "
                            "[-reward_clip, reward_clip] (default: %(default)s)")


def agent_gamma(spec):
    """The agent's discount, which --normalize_reward's returns are taken with."""
    try:
        return float(spec.agent.gamma)
    except AttributeError:
        raise ConfigError(f"--normalize_reward divides rewards by the spread of the discounted "
                          f"return, taken with the agent's --gamma; agent {spec.agent_name!r} "
                          f"has no --gamma flag. Leave --normalize_reward out with it.") from None
