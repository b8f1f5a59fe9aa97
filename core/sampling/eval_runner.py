"""The test worker's schedule, shared by both training loops: one evaluation at a time at
multiples of --eval_interval env steps, on the test worker (core/sampling/evaluator.py) as a Ray actor, or
in this process while Ray is not (yet) up. A test worker that dies is replaced and its
evaluation run again with the same weights; env errors it survived are counted, and the
episodes it gave up (core/sampling/evaluator.py) counted and named. An evaluation whose every
episode was given up has no return: it is logged and not handed to the loop (no eval_return
in the metrics row, no best checkpoint, no target check), as if it had not been due.

An evaluation that reaches the run's target (--target_return) is confirmed before the loop sees
it (--confirm_episodes > 0): the test worker plays that many more episodes of the same weights on
fresh starts (Evaluator.confirm), and the evaluation comes back with a "confirmation" (its mean,
spread, 95% interval and whether its mean reaches the target too) and "reached_at_s", the run's
clock when it reached the target: time to target does not count the confirming episodes. The
stop rule (ddrl/callbacks.py StopAtReturn) stops only on a confirmed one.
"""
import math

import numpy as np

from core.lazy_ray import ray
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
        self.request = None          # (method, arguments), to run it again if the worker dies
        self.awaiting = None         # an evaluation that reached the target, until confirmed
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
        method, arguments = self.request
        self.pending = self.group.submit(self._worker(), method, *arguments)

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
            self.request = ("evaluate", (weights, version, env_steps, obs_statistics))
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
        self.pending = self.request = self.awaiting = None

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
            if self.awaiting is not None:  # this was the confirmation
                reached, self.awaiting = self.awaiting, None
                reached["confirmation"] = confirmation_summary(value, self.run.target_return)
                return reached
            if value.get("eval_return") is None:
                return None
            if self.needs_confirmation(value):
                value["reached_at_s"] = self.run.elapsed()
                self.awaiting = value
                self.request = ("confirm", (*self.request[1], self.spec.run.confirm_episodes))
                self._submit()
                continue
            return value
        return None

    def needs_confirmation(self, value):
        target = self.run.target_return
        return (self.spec.run.confirm_episodes > 0 and target is not None
                and value["eval_return"] >= target)


def confirmation_summary(value, target):
    """What a confirming evaluation says (summary.json, the model card): its mean return and
    spread, a 95% interval of the mean (normal, from the episodes' sample spread), its episodes
    and whether the mean reaches ``target``. With every episode lost it confirms nothing."""
    returns = np.asarray(value.get("returns") or [], dtype=float)
    mean = value.get("eval_return")
    half = (1.96 * float(np.std(returns, ddof=1)) / math.sqrt(len(returns))
            if len(returns) > 1 else None)
    return {"eval_return": mean, "eval_return_std": value.get("eval_return_std"),
            "interval": None if half is None else [mean - half, mean + half],
            "episodes": len(returns), "episodes_lost": value.get("eval_episodes_lost", 0),
            "eval_success_rate": value.get("eval_success_rate"),
            "confirmed": mean is not None and mean >= target}
