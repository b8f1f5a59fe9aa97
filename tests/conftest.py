"""Shared fixtures: the repo on the import path (here and in Ray's workers), one torch thread
(again after every test), and one Ray instance for the whole session, started only when a test
asks for it. And the tiers (pytest.ini): every test has exactly one of unit, contract, e2e,
chaos, cluster; a module sets its usual tier with ``pytestmark`` and a test marked otherwise
keeps its own, so that ``-m unit`` selects exactly the tests whose tier is unit."""
import os
import sys

# OpenMP threads that sleep when idle, in the test processes and every process they start
# (read when torch loads its OpenMP runtime, so before `import torch`). A replay run with
# --num_workers 0 learns on two torch threads (--learner_threads auto), whose idle thread
# spins by default: next to the other xdist worker's processes the spinning took the CPU
# the rest of the suite needed. Measured on a 2-core AMD EPYC (AVX2) with two other
# single-threaded jobs running, as in the suite: the SAC Pendulum preset for 600 steps took
# 38.6 s and 35 s of CPU, 25.2 s and 14 s with PASSIVE (ACTIVE, spinning always: 135 s). The
# e2e tier as `make test` runs it: 1,310 s against 1,327 s, its test time 2,555 s against
# 2,600 s (test_gpu_check 165 -> 93 s, test_ma_sac 72 -> 21 s, test_presets 223 -> 191 s):
# within the tier's spread from run to run (fresh-clone CI on that machine: 1,259-1,309 s).
# Only the tests' speed changes: what a run computes does not depend on how threads wait.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
_path = os.environ.get("PYTHONPATH", "")
if REPO_ROOT not in _path.split(os.pathsep):
    # Ray's workers inherit the driver's environment: they import envs/, models/ from here.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, _path) if p)

torch.set_num_threads(1)

# Runs under test draw no learning_curves.png (--no-plots by default, here and in every process
# the tests start): the plot child costs about a second of CPU per run, and the suite makes
# hundreds. The tests of the curves themselves (test_run_outputs.py, test_loggers.py) ask for
# them with --plots.
os.environ["DDRL_PLOTS"] = "0"

# main.py in a test starts as a fork of an interpreter that has imported what it imports
# (tests/warm_start.py says what that keeps and what falls back to a fresh exec): ~2.5-3 s of
# CPU saved on each of the ~220 starts in the end-to-end tier. DDRL_TEST_WARM_START=0: fresh.
from tests import warm_start  # noqa: E402

warm_start.install()

TIERS = ("unit", "contract", "e2e", "chaos", "cluster")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    """Give each test the tier closest to it (its own marker, else its class's, else its
    module's) as its only tier marker, and refuse a test without one: a new test says what it
    is, and ``make test-fast`` (-m "unit or contract") never runs an e2e test by inheritance."""
    untiered, chosen, parents = [], {}, set()
    for item in items:
        found = [(node, mark) for node, mark in item.iter_markers_with_node()
                 if mark.name in TIERS]
        if not found:
            untiered.append(item.nodeid)
            continue
        nearest = found[0][0]
        tiers = {mark.name for node, mark in found if node is nearest}
        if len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid} has several tiers ({', '.join(sorted(tiers))}):"
                                    f" give it one of {', '.join(TIERS)}.")
        chosen[item] = tiers.pop()
        parents.update(node for node, _ in found if node is not item)
    if untiered:
        raise pytest.UsageError(
            f"{len(untiered)} test(s) without a tier: {', '.join(untiered[:5])}"
            f"{' ...' if len(untiered) > 5 else ''}. Mark each (or its module, with pytestmark)"
            f" with one of {', '.join(TIERS)} (pytest.ini says what each means).")
    for node in parents:
        node.own_markers[:] = [m for m in node.own_markers if m.name not in TIERS]
    for item, tier in chosen.items():
        item.own_markers[:] = [m for m in item.own_markers if m.name not in TIERS]
        item.add_marker(tier)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test leaves this process on one torch thread: a local parameter server built by a
    test asks for two (--learner_threads auto with --num_workers 0), and
    core/distributed/process.py keeps the largest request a process has seen, so without this
    the rest of the session would run on two threads beside Ray's workers."""
    yield
    from core.distributed import process
    process._process_threads = 0
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    import ray
    started = False
    if not ray.is_initialized():
        # address="local": start our own instance even when another one runs on this machine
        # (ray.init without an address joins any local cluster it finds).
        from core.distributed import loopback
        loopback.prepare()  # Ray would otherwise swap 127.0.0.1 for the outward address
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 _node_ip_address=loopback.LOOPBACK, logging_level="WARNING")
        started = True
    yield ray
    if started:
        ray.shutdown()
