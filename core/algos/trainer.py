"""The Trainer base class: what every training loop shares, and the contract core/run/session.py
calls.

A trainer drives one run: it owns the worker groups (core/sampling/worker_group.py), the evaluation
schedule (core/sampling/eval_runner.py), the observation normalizer, and its part of checkpoints; the
session (core/run/session.py) builds it, restores it, asks it for checkpoint state and calls
``train()``. The built-in loops are PPO's (core/algos/ppo_trainer.py, gradient-collecting) and SAC's
(core/algos/sac_trainer.py, Ape-X shape). A plugin brings its own loop by subclassing Trainer and
registering it (core/algos/trainers.py ``register_trainer``); its model names it (``trainer = "..."``).

The contract, in the order the session uses it:

- ``metric_columns``: the columns of metrics.csv, in order (a row may leave any empty);
- ``add_args(parser)``: the loop's own flags (parsed with the run's, so ``-h`` shows them);
- ``starts_without_ray``: True when learning can begin in this process while Ray starts;
- ``__init__(args, spec, plugins, spaces, run, faults, ray_starter)``;
- ``restore(weights, optimizer_state, updates)`` and ``set_state(state, fresh_episode_seed)``
  after a --restore; ``train()`` runs until ``run.record(...)`` says stop;
- ``drain()``, ``checkpoint_state()`` -> (weights, optimizer state, updates) and
  ``get_state()`` -> a dict of plain data, for every checkpoint; ``evaluation_state()`` for
  best.pt; ``summary_extra()`` for summary.json; ``close()`` at the end.

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
from core.learning.normalizer import ObsNormalizer


class Trainer:
    #: metrics.csv's columns, in order
    metric_columns = ()
    #: learning can start in this process before Ray is up (core/run/session.py starts it in the
    #: background)
    starts_without_ray = False
    #: the agent contract this loop calls (agents/base.py); the session refuses another kind
    agent_kind = None

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
        #: set by core/run/session.py: () -> the newest checkpoint as (weights, optimizer state,
        #: updates, meta, state), or None (for a loop that restores itself in place)
        self.recovery_source = None
        self.obs_normalizer = (ObsNormalizer(spaces[0].shape, clip=args.obs_clip)
                               if getattr(args, "normalize_obs", False) else None)

    # -- the loop ----------------------------------------------------------------------------
    def train(self):
        """Run until ``self.run.record(row, eval_result)`` returns True (a target, a budget or
        a stop request), then let the last evaluation finish."""
        raise NotImplementedError

    def worker_groups(self):
        """The loop's WorkerGroups (close() retires their members)."""
        return []

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

    def merge_obs_moments(self, rollout_stats):
        if self.obs_normalizer is not None:
            for stats in rollout_stats:
                self.obs_normalizer.update(stats.obs_moments)

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
        default what evaluating needs (the normalizer)."""
        return self.evaluation_state()

    def set_state(self, state, fresh_episode_seed):
        """Apply ``get_state()``'s dict from a checkpoint; True if the run continues exactly
        (every worker's episodes and random generators as they were)."""
        self.load_evaluation_state(state)
        return False

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

    @staticmethod
    def saved_worker_states(state):
        """{slot: worker state} from a checkpoint's ``worker_states`` entry."""
        saved = state.get("workers") or []
        slots = state.get("worker_slots") or list(range(len(saved)))
        return dict(zip(slots, saved))
