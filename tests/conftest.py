"""Shared fixtures: the repo on the import path (here and in Ray's workers), one torch thread
(again after every test), and one Ray instance for the whole session, started only when a test
asks for it."""
import os
import sys

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


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test leaves this process on one torch thread: a local parameter server built by a
    test asks for two (--learner_threads auto with --num_workers 0), and core/process.py keeps
    the largest request a process has seen, so without this the rest of the session would run
    on two threads beside Ray's workers."""
    yield
    from core import process
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
