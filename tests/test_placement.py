"""core.distributed.placement: the in-process handles that stand in for Ray actors, and how Ray is started."""
import os

import numpy as np
import pytest
import ray

from core.distributed.placement import (INLINE_WEIGHTS_MAX_BYTES, PACKAGES, LocalRef, Placement,
                                        RayStarter, code_runtime_env, start_ray)
from core.distributed import placement
from core.errors import ConfigError
from core.plugins import REPO_ROOT
from options.options import parse_args

pytestmark = pytest.mark.unit


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, amount):
        self.value += amount
        return self.value


def test_local_placement_runs_methods_in_process_behind_a_ray_like_handle():
    placement = Placement(local=True)
    handle = placement.spawn(Counter, 10)
    ref = handle.add.remote(5)
    assert isinstance(ref, LocalRef) and placement.ready(ref)
    assert placement.get(ref) == 15
    # a LocalRef passed as an argument arrives as its value, as a Ray ObjectRef would
    assert placement.get([handle.add.remote(LocalRef(2)), handle.add.remote(1)]) == [17, 18]


def test_small_weights_travel_inline_and_need_no_object_store():
    small = {"w": np.zeros(INLINE_WEIGHTS_MAX_BYTES // 4, dtype=np.float32)}  # exactly the limit
    assert Placement(local=False).share(small) is small
    assert Placement(local=True).share(small).value is small


def captured_init(monkeypatch):
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: calls.append(kw))
    monkeypatch.setenv("PYTHONPATH", REPO_ROOT)
    return calls


@pytest.mark.contract
def test_start_ray_with_address_joins_that_cluster_and_ships_the_code(monkeypatch):
    calls = captured_init(monkeypatch)
    asked = []  # no connection leaves the machine: the check is recorded, not made
    monkeypatch.setattr(placement, "check_address_answers", lambda args: asked.append(args))
    start_ray(parse_args(["--config", "none", "--address", "10.0.0.5:6379"]))
    assert [a.address for a in asked] == ["10.0.0.5:6379"]
    [kwargs] = calls
    assert kwargs["address"] == "10.0.0.5:6379"
    assert kwargs["runtime_env"]["working_dir"] == REPO_ROOT
    assert "num_cpus" not in kwargs


@pytest.mark.contract
def test_an_installed_ddrl_sends_a_copy_of_its_packages_to_a_cluster_not_site_packages(tmp_path):
    """From a wheel, REPO_ROOT is site-packages: as working_dir it would upload torch and all.
    A copy of ddrl's packages and presets goes instead, laid out as a checkout."""
    site, staging = tmp_path / "site-packages", tmp_path / "staging"
    for name in PACKAGES:
        (site / name / "__pycache__").mkdir(parents=True)
        (site / name / "x.py").write_text("")
    (site / "torch").mkdir()
    staging.mkdir()
    (tmp_path / "plugins").mkdir()
    args = parse_args(["--config", "none", "--address", "10.0.0.5:6379",
                       "--user_dir", str(tmp_path / "plugins")])
    env = code_runtime_env(args, str(staging), str(site))
    assert env == {"working_dir": str(staging), "py_modules": [str(tmp_path / "plugins")]}
    assert sorted(os.listdir(staging)) == sorted(PACKAGES)
    assert all(os.listdir(staging / name) == ["x.py"] for name in PACKAGES)
    assert set(PACKAGES) == set(pyproject_packages())
    # a checkout goes whole, with the plugins beside it
    checkout = code_runtime_env(args, str(staging), REPO_ROOT)
    assert checkout["working_dir"] == REPO_ROOT
    assert checkout["py_modules"] == [str(tmp_path / "plugins")]


@pytest.mark.contract
def test_joining_leaves_no_staging_folder_behind(monkeypatch, tmp_path):
    """A checkout joins --address as it is: no copy is staged. An installed ddrl's copy goes
    once ray.init returns, or, when the run ends while ray.init still uploads it (an elastic
    start that finished first), when RayStarter stops. Before, a checkout made an empty
    /tmp/ddrl-job-* folder for every join and one was left behind whenever the process ended
    during ray.init (seen after the e2e tier)."""
    import threading
    monkeypatch.setattr(placement.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(placement, "check_address_answers", lambda args: None)
    args = parse_args(["--config", "none", "--address", "10.0.0.5:6379"])
    seen = []

    def init(**kwargs):
        folder = kwargs["runtime_env"]["working_dir"]
        seen.append((folder, sorted(os.listdir(folder))))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    start_ray(args)
    assert seen[-1][0] == REPO_ROOT and os.listdir(tmp_path) == []

    monkeypatch.setattr(placement, "is_checkout", lambda root=REPO_ROOT: False)
    start_ray(args)  # installed: the copy is there while ray.init runs, gone after
    assert os.path.dirname(seen[-1][0]) == str(tmp_path) and seen[-1][1] == sorted(PACKAGES)
    assert os.listdir(tmp_path) == []

    uploading, release = threading.Event(), threading.Event()

    def hanging_init(**kwargs):
        uploading.set()
        release.wait(30)
    monkeypatch.setattr(ray, "init", hanging_init)
    starter = RayStarter(args)
    try:
        assert uploading.wait(30) and len(os.listdir(tmp_path)) == 1
        starter.stop()  # the run ended first
        assert os.listdir(tmp_path) == []
    finally:
        release.set()
        starter.thread.join(30)


def pyproject_packages():
    import tomllib
    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*") for pattern in include]


@pytest.mark.contract
def test_an_address_where_nothing_listens_is_refused_at_once(monkeypatch):
    """Before, ray.init retried for over a minute, and a PPO run learning in this process
    meanwhile (an elastic start) trained to its end on this machine alone, without a word."""
    import socket
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # the session's Ray may be up
    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail("ray.init was called"))
    args = parse_args(["--config", "none", "--address", f"127.0.0.1:{port}"])
    for start in (start_ray, RayStarter):
        with pytest.raises(ConfigError, match=f"cannot join the Ray cluster at --address "
                                              f"'127.0.0.1:{port}': nothing answers at "
                                              f"127.0.0.1:{port}"):
            start(args)


@pytest.mark.contract
def test_start_ray_without_address_starts_its_own_local_instance(monkeypatch):
    calls = captured_init(monkeypatch)
    start_ray(parse_args(["--config", "none", "--num_cpus", "2"]))
    [kwargs] = calls
    assert kwargs.get("address") == "local"
    assert kwargs["num_cpus"] == 2 and kwargs["_node_ip_address"] == "127.0.0.1"


@pytest.mark.contract
def test_start_ray_is_a_no_op_when_ray_is_already_up(monkeypatch):
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: calls.append(kw))
    start_ray(parse_args(["--config", "none"]))
    assert calls == []


@pytest.mark.parametrize("nodes, actors, share", [
    ([2], 2, 1.0),                # one per CPU
    ([2], 16, 0.125),             # more workers than CPUs: an equal share
    ([1, 1, 1], 4, 0.5),          # an equal share (0.75) would fit 3, not 4
    ([1, 2, 2], 7, 0.6666),       # 1 + 3 + 3 actors of 2/3 CPU
    ([6, 6, 6], 16, 1.0),
])
def test_rollout_workers_reserve_a_share_that_fits_on_the_nodes(nodes, actors, share):
    from core.distributed.placement import fitting_share
    found = fitting_share(nodes, actors)
    assert found == pytest.approx(share)
    assert sum(int(c / found + 1e-9) for c in nodes) >= actors
    # and it is the largest such share: a little more would leave an actor without a place
    if found < 1.0:
        assert sum(int(c / (found + 1e-3)) for c in nodes) < actors


@pytest.mark.contract
@pytest.mark.parametrize("flags, recorded", [([], False), (["--ray_task_events"], True)])
def test_actors_record_task_events_only_with_the_flag(ray_session, flags, recorded):
    """Off by default: Ray would keep every call's events in the GCS (it grew ~5 MB a minute in
    the soak). A method's setting follows its actor's (ray/actor.py)."""
    from core.distributed.placement import record_task_events
    from core.distributed.process import setup_process
    setup_process(parse_args(["--config", "none", *flags]))
    try:
        from core.learning.replay_buffer import ReplayBuffer  # importable where Ray's workers run
        handle = Placement(local=False).spawn(ReplayBuffer, 4, (1,), (1,), num_cpus=0)
        assert handle._ray_enable_task_events is recorded
        assert ray.get(handle.generations.remote(np.array([0]))).tolist() == [0]
        ray.kill(handle)
    finally:
        record_task_events(False)


@pytest.mark.unit
def test_every_ddrl_process_runs_numpys_blas_on_one_thread():
    """numpy's OpenBLAS pool hung the driver when Ray's start forked in the background while
    the elastic start's worker acted on a big batch (core/distributed/process.py); torch's
    threads stay what --torch_threads asks."""
    import subprocess
    import sys
    code = ("import numpy, torch; from threadpoolctl import threadpool_info; "
            "from options.options import parse_args; "
            "from core.distributed.process import setup_process; "
            "setup_process(parse_args(['--config', 'none', '--torch_threads', '2'])); "
            "print([i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'], "
            "torch.get_num_threads())")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[1] 2"
