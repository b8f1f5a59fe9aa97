"""A group of actors of one kind (rollout workers, learner workers, the test worker) that the
training loops call as one: it spawns them, knows which have finished starting, gathers their
results with ``ray.wait`` and a per-call timeout, and replaces one that died or hung (its
in-flight work is dropped). Members may join and leave while a run goes on.

After RLlib's env runner group and actor manager (restart failed runners, go on with the healthy
ones) and Sample Factory's runners. A member can also live in this process (``local=True``, a
``core.distributed.placement.LocalHandle``): its calls run at submission and cannot die without the driver.
"""
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional


from core.lazy_ray import ray
from core.faults import actor_died, short_error
from core.errors import ConfigError, RunFailure
from core.distributed.placement import LocalHandle, LocalRef, actor_node, free_cpus_per_node

MISSING = object()          # what ``take`` returns for work lost with its worker
START_FAILURES_IN_A_ROW = 3  # a slot whose replacements keep dying while starting is a bug


@dataclass(eq=False)
class Member:
    slot: int                     # stable index: seeds and logs derive from it
    handle: Any
    local: bool = False
    generation: int = 0           # 0 for the first actor of the slot, +1 per replacement
    ready: bool = False           # constructor finished (envs built, model made)
    ready_ref: Any = None
    start_failures: int = 0
    node_id: Optional[str] = None  # the Ray node it runs on, known once it is ready

    def __repr__(self):
        return f"<{'local ' if self.local else ''}member {self.slot}.{self.generation}>"


@dataclass
class Call:
    member: Member
    submitted: float = field(default_factory=time.monotonic)


class WorkerGroup:
    def __init__(self, kind: str, factory: Callable[..., Any], faults,
                 env_steps: Callable[[], int] = lambda: 0, timeout: Optional[float] = None):
        """``factory(slot, generation, local, node=None)`` returns a new handle (``node``: a Ray
        node id to prefer, softly, for a replacement); ``faults`` is the run's
        core.faults.Faults; ``env_steps()`` stamps the log lines; ``timeout`` (s) is how long
        a call may take before its worker counts as hung (None: no limit)."""
        self.kind = kind
        self.factory = factory
        self.faults = faults
        self.env_steps = env_steps
        self.timeout = timeout
        self.members: List[Member] = []
        self.calls: Dict[Any, Call] = {}
        self.dropped: List[Any] = []   # refs of lost work, read once done (see reap)

    # -- membership --------------------------------------------------------------------------
    def add(self, slot: int, local: bool = False, generation: int = 0,
            start_failures: int = 0, node: Optional[str] = None) -> Member:
        handle = self.factory(slot, generation, local, node=node)
        member = Member(slot, handle, local, generation, ready=local,
                        start_failures=start_failures)
        if not local:
            # resolves when __init__ returns, with the node the actor runs on
            member.ready_ref = handle.__ray_call__.remote(_node_of)
        self.members.append(member)
        return member

    def retire(self, member: Member):
        """Take a member out for good (no replacement); its work in flight is forgotten."""
        self._forget(member)
        if member.local:
            getattr(member.handle.obj, "close", lambda: None)()
        else:
            try:
                ray.kill(member.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def ready_members(self) -> List[Member]:
        return [m for m in self.members if m.ready]

    def remote_members(self) -> List[Member]:
        return [m for m in self.members if not m.local]

    def poll(self, timeout: float = 0) -> List[Member]:
        """Members that finished starting since the last poll (waiting up to ``timeout`` s for
        the first); one that died while starting is replaced."""
        self.reap()
        starting = {m.ready_ref: m for m in self.members if not m.ready}
        if not starting:
            return []
        done, _ = ray.wait(list(starting), num_returns=len(starting), timeout=timeout)
        newly = []
        for ref in done:
            member = starting[ref]
            try:
                member.node_id = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - classified in _failed
                self._failed(member, exc, "while starting")
                continue
            member.ready, member.ready_ref, member.start_failures = True, None, 0
            newly.append(member)
        return newly

    # -- calls -------------------------------------------------------------------------------
    def submit(self, member: Member, method: str, *args, **kwargs):
        """Start ``member.method(*args)``; returns its ref (a LocalRef for a local member, run
        now)."""
        ref = getattr(member.handle, method).remote(*args, **kwargs)
        if not member.local:
            self.calls[ref] = Call(member)
        return ref

    def take(self, ref, member: Optional[Member] = None):
        """The value of a finished call, or MISSING when its worker died (then replaced). An
        exception the method itself raised propagates: a bug or a fault past its limit."""
        if isinstance(ref, LocalRef):
            return ref.value
        call = self.calls.pop(ref, None)
        member = member or (call.member if call else None)
        try:
            return ray.get(ref)
        except Exception as exc:
            if member is None or not actor_died(exc):
                raise
            self._failed(member, exc)
            return MISSING

    def gather(self, refs: Dict[Any, Member], timeout: Optional[float] = None
               ) -> Dict[Member, Any]:
        """Wait for every call in ``refs`` (ref -> member) up to the timeout; {member: value}
        of those that delivered, in the order of ``refs`` whatever order they finished in (so
        that sums over them, gradients and advantage moments, do not depend on timing).
        Members that died or did not answer in time are replaced and their work dropped."""
        timeout = self.timeout if timeout is None else timeout
        values = {}
        remote = [r for r in refs if not isinstance(r, LocalRef)]
        for ref in refs:
            if isinstance(ref, LocalRef):
                values[ref] = ref.value
        if remote:
            done, pending = ray.wait(remote, num_returns=len(remote), timeout=timeout)
            for ref in done:
                value = self.take(ref, refs[ref])
                if value is not MISSING:
                    values[ref] = value
            for ref in pending:
                self.drop([ref])
                self._failed(refs[ref], f"no answer within {timeout:g} s (--worker_timeout)")
        return {refs[ref]: values[ref] for ref in refs if ref in values}

    def ask_ready(self, method: str, timeout: float, order=lambda m: m.slot
                  ) -> Dict[Member, Any]:
        """``method()`` of every ready member at once, {member: value} of those that answer
        within ``timeout`` (gather's rules), in ``order``: a question such as where each
        computes, asked as a run ends."""
        calls = {self.submit(m, method): m for m in sorted(self.ready_members(), key=order)}
        return self.gather(calls, timeout=timeout) if calls else {}

    def hung(self, now: Optional[float] = None) -> List[Any]:
        """Refs of calls older than the timeout (for loops that wait on many kinds of work);
        their members are replaced."""
        if self.timeout is None:
            return []
        now = time.monotonic() if now is None else now
        late = [ref for ref, call in self.calls.items() if now - call.submitted > self.timeout]
        for ref in late:
            member = self.calls[ref].member
            self.drop([ref])
            if member in self.members:
                self._failed(member, f"no answer within {self.timeout:g} s (--worker_timeout)")
        return late

    def check_health(self, timeout: float = 30.0) -> List[Member]:
        """Ping every remote member at once; the dead are replaced. Returns them."""
        pings = {m.handle.__ray_ready__.remote(): m for m in self.members if not m.local}
        if not pings:
            return []
        done, _ = ray.wait(list(pings), num_returns=len(pings), timeout=timeout)
        dead = []
        for ref in done:
            try:
                ray.get(ref)
            except Exception as exc:
                if not actor_died(exc):
                    raise
                dead.append(pings[ref])
                self._failed(pings[ref], exc)
        return dead

    # -- faults ------------------------------------------------------------------------------
    def drop(self, refs):
        """Work whose result no longer matters (lost with a worker, or the actors it needed)."""
        for ref in refs:
            self.calls.pop(ref, None)
            if not isinstance(ref, LocalRef):
                self.dropped.append(ref)

    def reap(self):
        """Read the dropped refs that are done: Ray prints an "Unhandled error" block for every
        failed result nobody read, and each of these faults was logged in one line already."""
        if not self.dropped:
            return
        done, self.dropped = ray.wait(self.dropped, num_returns=len(self.dropped), timeout=0)
        for ref in done:
            try:
                ray.get(ref)
            except Exception:  # noqa: BLE001 - the error is the expected one
                pass

    def _forget(self, member: Member):
        if member in self.members:
            self.members.remove(member)
        self.drop([r for r, c in self.calls.items() if c.member is member])

    def _failed(self, member: Member, error, when=""):
        """Replace a member that died or hung. Raises RunFailure past --max_worker_restarts, or
        when a slot's replacements keep dying while they start (their constructor fails)."""
        self.retire(member)
        if not when and not member.ready and isinstance(error, BaseException):
            # A call queued on a member still starting (the test worker takes one) reports
            # its constructor's failure too: the same fault as poll's, counted the same way.
            # (A slow start past --worker_timeout stays a hang.)
            when = "while starting"
        bad_input = config_error_in_constructor(error) if when else None
        if bad_input is not None:  # the same input fails the same way in every replacement
            raise ConfigError(f"{self.kind} {member.slot} could not start: {bad_input}")
        what = short_error(error) if isinstance(error, BaseException) else str(error)
        start_failures = member.start_failures + 1 if when else 0
        if start_failures >= START_FAILURES_IN_A_ROW:
            raise RunFailure(f"{self.kind} {member.slot} died while starting "
                             f"{start_failures} times in a row (last: {what}); its constructor "
                             f"fails on this machine (see the actor's log above).")
        self.faults.worker_restarted(
            f"{self.kind} {member.slot} died{(' ' + when) if when else ''} ({what}); its work "
            f"in flight is dropped and a replacement joins", self.env_steps())
        lost_node = member.node_id or (None if member.local else actor_node(member.handle))
        self.add(member.slot, generation=member.generation + 1, start_failures=start_failures,
                 node=self.node_for_replacement(lost_node))

    def node_for_replacement(self, lost_node: Optional[str]) -> Optional[str]:
        """Where a replacement should go when its predecessor died on ``lost_node``: the other
        live node with the most free CPUs, then the fewest members of this group (None: no
        preference, e.g. on one machine). Losing a node is seen here seconds before Ray's GCS
        takes it for dead; until then the lost node looks the emptiest to Ray's own SPREAD,
        which put the replacement there to die while starting (and the next one, and ...)."""
        if lost_node is None:
            return None
        free = free_cpus_per_node()
        free.pop(lost_node, None)
        if not free:
            return None
        load = {node: 0 for node in free}
        for m in self.members:
            if m.node_id in load:
                load[m.node_id] += 1
        return max(free, key=lambda node: (free[node], -load[node]))


def config_error_in_constructor(error) -> Optional[str]:
    """The message of a ConfigError (bad input: an unknown plugin name, a flag this node
    cannot serve) that an actor's constructor raised, from the error Ray reports for the dead
    actor; None for anything else (a crash, a lost node: those are faults, and replaced)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, ConfigError):  # a RayTaskError around it
        return str(cause)
    if not getattr(error, "actor_init_failed", False):
        return None
    marker = f"{ConfigError.__module__}.ConfigError: "
    text = getattr(error, "error_msg", None) or str(error)
    if marker not in text:
        return None
    return text.rsplit(marker, 1)[1].strip().splitlines()[0]


def _node_of(actor) -> str:
    """Run inside an actor (``__ray_call__``): the id of the Ray node it lives on."""
    return ray.get_runtime_context().get_node_id()


def alive(handle, timeout: float = 30.0) -> bool:
    """False when the actor behind ``handle`` is dead; an actor too busy to answer within
    ``timeout`` counts as alive (in-process handles always are)."""
    if isinstance(handle, LocalHandle):
        return True
    try:
        ray.get(handle.__ray_ready__.remote(), timeout=timeout)
        return True
    except ray.exceptions.GetTimeoutError:
        return True
    except Exception as exc:  # noqa: BLE001
        return not actor_died(exc)
