"""The test worker's schedule, shared by both training loops: one evaluation at a time at
multiples of --eval_interval env steps, on the test worker (core/sampling/evaluator.py) as a Ray actor, or
in this process while Ray is not (yet) up. A test worker that dies is replaced and its
evaluation run again with the same weights; env errors it survived are counted, and the
episodes it gave up (core/sampling/evaluator.py) counted and named. An evaluation whose every
episode was given up has no return: it is logged and not handed to the loop (no eval_return
in the metrics row, no best checkpoint, no target check), as if it had not been due.
"""
import ray

from core.sampling.evaluator import Evaluator
from core.distributed.placement import LocalRef, Placement
from core.sampling.worker_group import MISSING, WorkerGroup


class EvalRunner:
    def __init__(self, spec, run, faults, remote_available):
        """``remote_available()`` tells whether the test worker may be a Ray actor now."""
        self.spec, self.run, self.faults = spec, run, faults
        self.remote_available = remote_available
        self.group = WorkerGroup("test worker", self._make, faults, lambda: run.env_steps)
        self.pending = None          # ref of the evaluation in flight
        self.request = None          # its arguments, to run it again if the worker dies
        self.next_eval = None        # set by begin(), once a restore has set the counters

    def _make(self, slot, generation, local, node=None):  # near the driver, always
        return Placement(local).spawn(Evaluator, self.spec, self.spec.run.eval_episodes,
                                      num_cpus=0)

    def prepare(self):
        """Start the remote test worker now if Ray allows (it takes seconds to import torch and
        build its envs): used once it is up."""
        if self.remote_available() and not any(not m.local for m in self.group.members):
            self.group.add(0)

    def _worker(self):
        """The remote test worker once it is up; until then the in-process one if there is one
        (the PPO stand-in phase), else the remote one, which queues the call."""
        self.prepare()
        self.group.poll()
        remote = [m for m in self.group.members if not m.local]
        local = [m for m in self.group.members if m.local]
        ready = [m for m in remote if m.ready]
        if ready:
            for member in local:   # evaluations leave the driver
                self.group.retire(member)
            return ready[0]
        if local:
            return local[0]
        return remote[0] if remote else self.group.add(0, local=True)

    def _submit(self):
        self.pending = self.group.submit(self._worker(), "evaluate", *self.request)

    def begin(self):
        """Start the schedule at the run's env steps now: multiples of --eval_interval, also
        after a restore or an in-place recovery."""
        interval = self.spec.run.eval_interval
        self.next_eval = (self.run.env_steps // interval + 1) * interval

    def poll(self, weights_and_version, obs_statistics=None):
        """A finished evaluation's result (or None); starts the next one when it is due.
        ``weights_and_version()`` gives the weights to evaluate (called only then)."""
        result = self._result(wait=False)
        env_steps = self.run.env_steps
        interval = self.spec.run.eval_interval
        if self.next_eval is None:
            self.begin()
        if self.pending is None and env_steps >= self.next_eval:
            weights, version = weights_and_version()
            self.request = (weights, version, env_steps, obs_statistics)
            self._submit()
            self.next_eval = env_steps + interval
            if isinstance(self.pending, LocalRef):
                result = self._result(wait=True)
        return result

    def finish(self):
        """The evaluation still in flight, waited for (the last one counts), or None."""
        return self._result(wait=True) if self.pending is not None else None

    def cancel(self):
        """Forget the evaluation in flight (its weights may be lost with a dead server); the
        next one starts when due."""
        if self.pending is not None:
            self.group.drop([self.pending])
        self.pending = self.request = None

    def _result(self, wait):
        while self.pending is not None:
            if not wait and not isinstance(self.pending, LocalRef):
                done, _ = ray.wait([self.pending], timeout=0)
                if not done:
                    return None
            value = self.group.take(self.pending)
            if value is MISSING:      # the test worker died: its replacement runs it again
                self._submit()
                continue
            self.pending = None
            survived = value.get("env_errors", 0)
            if survived:
                self.faults.eval_env_errors(survived, self.run.env_steps)
            if value.get("eval_episodes_lost"):
                self.faults.eval_episodes_lost(value, self.run.env_steps)
            if value.get("eval_return") is None:
                return None
            return value
        return None
