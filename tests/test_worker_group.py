"""core/sampling/worker_group.py: results of the healthy, replacement of the dead and the hung, limits;
and core/faults.py's classification of Ray's errors."""
import os
import sys
import time
from types import SimpleNamespace

import pytest
import ray.cloudpickle

from core.faults import Faults, actor_died, all_finite, death_inside
from core.errors import ConfigError, RunFailure
from core.distributed.placement import LocalHandle, remote_class
from core.sampling.worker_group import MISSING, WorkerGroup, alive

pytestmark = pytest.mark.chaos

# Workers import this module by value (it is not importable from their sys.path).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Echo:
    def __init__(self, slot, fail_on_start=False):
        if fail_on_start == "config":
            raise ConfigError("--gym_id X: this node has no such simulator")
        if fail_on_start:
            raise ValueError("constructor fails")
        self.slot = slot

    def work(self, x, die=False, sleep=0.0):
        if die:
            os._exit(1)  # as SIGKILL or the OOM killer would: no exception, the process is gone
        time.sleep(sleep)
        return self.slot, x

    def broken(self):
        raise ValueError("a bug in the worker's code")

    def where(self):
        return f"slot {self.slot}"


def make_group(max_restarts=1000, timeout=None, fail_on_start=False):
    faults = Faults(SimpleNamespace(max_worker_restarts=max_restarts, max_bad_updates=10,
                                    max_failures=3), printer=lambda line: None)

    def factory(slot, generation, local, node=None):
        if local:
            return LocalHandle(Echo(slot))
        return remote_class(Echo).options(num_cpus=0).remote(slot, fail_on_start)
    return WorkerGroup("echo worker", factory, faults, timeout=timeout), faults


def ready_group(size, **kwargs):
    group, faults = make_group(**kwargs)
    for slot in range(size):
        group.add(slot)
    end = time.time() + 60
    while len(group.ready_members()) < size and time.time() < end:
        group.poll(timeout=1)
    return group, faults


def test_gather_returns_the_healthy_results_and_replaces_a_dead_worker(ray_session):
    """A worker that exits mid-call: the healthy one's result comes back, the dead one is
    replaced by generation 1, which answers. 10 of 10 under a busy loop (tests/tools/flakes.py
    --runs 10 -m chaos, commit 016bb2e), 3.4-3.9 s."""
    group, faults = ready_group(2)
    first, second = sorted(group.members, key=lambda m: m.slot)
    calls = {group.submit(first, "work", 1): first,
             group.submit(second, "work", 2, die=True): second}
    results = group.gather(calls)
    assert results == {first: (0, 1)}
    assert faults.counts["worker_restarts"] == 1
    replacement = [m for m in group.members if m.slot == 1]
    assert len(replacement) == 1 and replacement[0].generation == 1
    end = time.time() + 60
    while not replacement[0].ready and time.time() < end:
        group.poll(timeout=1)
    assert replacement[0].ready
    assert group.take(group.submit(replacement[0], "work", 3)) == (1, 3)


@pytest.mark.contract
def test_gather_gives_the_results_in_the_order_of_the_calls_not_of_their_finish(ray_session):
    """The training loops sum what gather returns (gradients, advantage moments): in the order
    the calls were made, the sums are the same whichever worker answers first."""
    group, _ = ready_group(3)
    members = sorted(group.members, key=lambda m: m.slot)
    delays = {0: 0.6, 1: 0.0, 2: 0.3}  # slot 1 answers first, slot 0 last
    calls = {group.submit(m, "work", m.slot, sleep=delays[m.slot]): m for m in members}
    assert list(group.gather(calls)) == members
    local = group.add(3, local=True)
    calls = {group.submit(members[2], "work", 0, sleep=0.3): members[2],
             group.submit(local, "work", 0): local, group.submit(members[0], "work", 0): members[0]}
    assert list(group.gather(calls)) == [members[2], local, members[0]]


def test_a_worker_that_does_not_answer_in_time_is_replaced(ray_session):
    """A call past the group's timeout (0.5 s against a 30 s sleep): no result, the worker
    replaced. 10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    2.5-3.0 s."""
    group, faults = ready_group(1, timeout=0.5)
    member = group.members[0]
    results = group.gather({group.submit(member, "work", 1, sleep=30): member})
    assert results == {} and faults.counts["worker_restarts"] == 1
    assert member not in group.members and [m.generation for m in group.members] == [1]


@pytest.mark.contract
def test_an_exception_of_the_workers_own_code_is_not_swallowed(ray_session):
    group, faults = ready_group(1)
    member = group.members[0]
    with pytest.raises(ValueError, match="a bug in the worker's code"):
        group.take(group.submit(member, "broken"))
    assert faults.counts["worker_restarts"] == 0 and member in group.members


def test_take_gives_missing_for_work_lost_with_its_worker(ray_session):
    """10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    2.3-3.0 s."""
    group, _ = ready_group(1)
    member = group.members[0]
    assert group.take(group.submit(member, "work", 1, die=True)) is MISSING
    assert not alive(member.handle, timeout=10)


def test_restarts_past_the_limit_stop_the_run(ray_session):
    """10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    3.6-5.0 s."""
    group, faults = ready_group(1, max_restarts=1)
    group.gather({group.submit(group.members[0], "work", 1, die=True): group.members[0]})
    end = time.time() + 60
    while not group.members[0].ready and time.time() < end:
        group.poll(timeout=1)
    with pytest.raises(RunFailure, match="--max_worker_restarts 1"):
        group.gather({group.submit(group.members[0], "work", 1, die=True): group.members[0]})


def test_a_constructor_that_keeps_failing_is_a_clear_error_not_an_endless_restart(ray_session):
    """10 of 10 under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e),
    1.4-1.6 s."""
    group, faults = make_group(fail_on_start=True)
    group.add(0)
    with pytest.raises(RunFailure, match="died while starting 3 times in a row"):
        for _ in range(20):
            group.poll(timeout=30)
    assert faults.counts["worker_restarts"] == 2


def test_a_call_queued_on_a_member_that_fails_to_start_is_a_start_failure(ray_session):
    """The test worker gets its first call before its constructor has returned. When the
    constructor raises, the call's error is the first to tell: it is classified as poll's
    would be, a ConfigError the run's error (no restart counted) and a crash a start failure
    (counted toward --max_worker_restarts and the failures in a row). Before, the call's path
    counted a ConfigError as one crash (a worker restart) and only the replacement stopped."""
    group, faults = make_group(fail_on_start="config")
    member = group.add(0)
    with pytest.raises(ConfigError, match="echo worker 0 could not start: --gym_id X: this "
                                          "node has no such simulator"):
        group.take(group.submit(member, "work", 1))
    assert faults.counts["worker_restarts"] == 0
    group, faults = make_group(fail_on_start=True)
    member = group.add(0)
    assert group.take(group.submit(member, "work", 1)) is MISSING
    assert faults.counts["worker_restarts"] == 1
    assert group.members[0].start_failures == 1


@pytest.mark.contract
def test_local_members_answer_at_once():
    group, _ = make_group()
    member = group.add(0, local=True)
    assert member.ready
    assert group.gather({group.submit(member, "work", 5): member}) == {member: (0, 5)}


def test_fault_classification(ray_session):
    """An actor's own death against a death inside a call it made. 10 of 10 under a busy
    loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e), 1.3-1.7 s."""
    @ray_session.remote
    class Dies:
        def pid(self):
            return os.getpid()

        def go(self, other):
            return ray_session.get(other.pid.remote())

    victim, caller = Dies.remote(), Dies.remote()
    os.kill(ray_session.get(victim.pid.remote()), 9)
    time.sleep(0.5)
    with pytest.raises(Exception) as own:
        ray_session.get(victim.pid.remote())
    with pytest.raises(Exception) as callee:
        ray_session.get(caller.go.remote(victim))
    assert actor_died(own.value)
    # The caller is alive: the death is its callee's, so not the caller's to be replaced for.
    assert not actor_died(callee.value) and death_inside(callee.value)
    assert all_finite({"a": 1.0, "b": 2}) and not all_finite({"a": float("nan")})
    assert all_finite({"a": float("inf"), "b": 1.0}, keys=["b"])


@pytest.mark.contract
def test_a_ready_member_knows_its_node(ray_session):
    group, _ = ready_group(1)
    assert group.members[0].node_id == ray.get_runtime_context().get_node_id()


@pytest.mark.unit
def test_a_replacement_prefers_the_other_node_with_the_most_room(monkeypatch):
    """A worker lost with its node: the replacement is asked onto another live node, the one
    with the most free CPUs, then the fewest members; with no other node, no preference."""
    import core.sampling.worker_group
    group, _ = make_group()
    free = {"lost": 2.0, "busy": 0.0, "roomy": 1.0, "also-roomy": 1.0}
    monkeypatch.setattr(core.sampling.worker_group, "free_cpus_per_node", lambda: dict(free))
    for slot, node in enumerate(["busy", "roomy", "roomy"]):
        group.members.append(SimpleNamespace(slot=slot, node_id=node))
    assert group.node_for_replacement("lost") == "also-roomy"
    free["roomy"] = 1.5
    assert group.node_for_replacement("lost") == "roomy"
    assert group.node_for_replacement(None) is None
    free = {"lost": 2.0}
    assert group.node_for_replacement("lost") is None


@pytest.mark.contract
def test_free_cpus_per_node_on_this_machine(ray_session):
    from core.distributed.placement import free_cpus_per_node
    free = free_cpus_per_node()
    assert list(free) == [ray.get_runtime_context().get_node_id()]
    assert 0 <= free[ray.get_runtime_context().get_node_id()] <= 2


def test_the_node_of_an_actor_that_died_while_starting_is_known(ray_session):
    """A member lost before it was ready: its node comes from Ray's actor table. 10 of 10
    under a busy loop (tests/tools/flakes.py --runs 10 -m chaos, commit 016bb2e), 1.6-1.9 s."""
    from core.distributed.placement import actor_node
    group, _ = make_group(fail_on_start=True)
    member = group.add(0)
    end = time.time() + 60
    while group.members[0] is member and time.time() < end:
        group.poll(timeout=1)
    assert group.members[0] is not member and member.node_id is None
    assert actor_node(member.handle) == ray.get_runtime_context().get_node_id()


@pytest.mark.unit
def test_a_config_error_in_a_constructor_is_read_from_rays_report_and_nothing_else_is():
    """What Ray reports for an actor whose __init__ raised: the ConfigError's message (the run
    stops on bad input at once, as in the driver), never a crash's or a lost node's."""
    from ray.exceptions import ActorDiedError, RayTaskError
    from core.errors import ConfigError
    from core.sampling.worker_group import config_error_in_constructor
    bad = ConfigError("--gym_id X: no such simulator on this node")
    wrapped = RayTaskError("RolloutWorker.__init__", "Traceback (most recent call last):\n  "
                           "File \"envs/x.py\", line 9, in __init__\ncore.errors.ConfigError: "
                           f"{bad}", bad)
    assert config_error_in_constructor(wrapped) == str(bad)
    died = ActorDiedError(wrapped)  # how ray.get of the dead actor's call reports it
    assert died.actor_init_failed
    assert config_error_in_constructor(died) == str(bad)
    crash = RayTaskError("RolloutWorker.__init__", "Traceback ...", RuntimeError("segfault"))
    assert config_error_in_constructor(crash) is None
    assert config_error_in_constructor(ActorDiedError(crash)) is None
    assert config_error_in_constructor(ActorDiedError()) is None  # a lost process or node


def test_ask_ready_puts_one_question_to_every_ready_member_in_the_order_asked():
    group, _ = make_group()
    for slot in range(3):
        group.add(slot, local=True)
    answered = group.ask_ready("where", timeout=1.0, order=lambda m: -m.slot)
    assert [(m.slot, value) for m, value in answered.items()] == [
        (2, "slot 2"), (1, "slot 1"), (0, "slot 0")]
    assert make_group()[0].ask_ready("where", timeout=1.0) == {}  # nobody to ask
