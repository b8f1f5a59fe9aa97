"""One code path, two placements: Ray actors, or the same classes in the driver process.

``Placement(local=True)`` gives objects a handle that looks like a Ray actor handle
(``handle.method.remote(...)`` returns a ref, ``placement.get(ref)`` its value), so the training
loops are written once; ``--num_workers 0`` runs them without Ray at all.
"""
import logging
import os
import shutil
import sys
import tempfile
import threading

import numpy as np

from core import lazy_ray
from core.lazy_ray import ray
from core.distributed import loopback
from core.distributed.devices import check_cluster_gpus
from core.plugins import REPO_ROOT
from core.errors import ConfigError


# Ray's own limit for inlining a task argument (max_direct_call_object_size) is 100 KB.
INLINE_WEIGHTS_MAX_BYTES = 64 * 1024


class LocalRef:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _LocalMethod:
    def __init__(self, method):
        self.method = method

    def remote(self, *args, **kwargs):
        # As Ray does for an actor: arguments that are refs arrive as their values. A local
        # stand-in (elastic start) is handed the same ray.put weights as the remote workers
        # once those exist: weights over INLINE_WEIGHTS_MAX_BYTES (a CNN's) travel by ref.
        args = [_value(a) for a in args]
        kwargs = {k: _value(v) for k, v in kwargs.items()}
        return LocalRef(self.method(*args, **kwargs))


def _value(arg):
    if isinstance(arg, LocalRef):
        return arg.value
    if lazy_ray.imported() and isinstance(arg, ray.ObjectRef):
        return ray.get(arg)
    return arg


class LocalHandle:
    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        return _LocalMethod(getattr(self.obj, name))


def resolve(ref):
    """The value behind a ref from either placement (for code that runs in both)."""
    return ref.value if isinstance(ref, LocalRef) else ray.get(ref)


_remote_classes = {}


def remote_class(cls):
    """ray.remote applied once per class (Ray anti-pattern: redefining remote classes)."""
    if cls not in _remote_classes:
        _remote_classes[cls] = ray.remote(cls)
    return _remote_classes[cls]


# Ray keeps the events of every task (submitted, running, finished: ~0.5-3 KB a task) in the
# GCS, up to 100,000 tasks, for the dashboard and `ray list tasks`. ddrl's actors take tens of
# calls a second, so a long run's GCS grew by ~5 MB a minute (benchmarks/probe.py soak) until that
# cap. Set per process by core/process.setup_process from --ray_task_events.
_TASK_EVENTS = {"enabled": False}


def record_task_events(enabled):
    _TASK_EVENTS["enabled"] = bool(enabled)


def fitting_share(node_cpus, num_actors):
    """The largest CPU share (at most 1) with which ``num_actors`` actors fit on nodes of
    ``node_cpus`` CPUs, each actor on one node: an even split of the total is not enough on
    several nodes (3 nodes of 1 CPU hold only 3 actors of 0.75 CPU, not 4). Shares are
    multiples of 1e-4 (Ray's resource precision)."""
    num_actors = max(1, int(num_actors))
    candidates = {1.0} | {c / k for c in node_cpus if c > 0 for k in range(1, num_actors + 1)}
    for share in sorted((min(1.0, s) for s in candidates), reverse=True):
        share = int(share * 1e4) / 1e4
        if share > 0 and sum(int(c / share + 1e-9) for c in node_cpus) >= num_actors:
            return share
    return 1e-4


def cpus_per_actor(num_actors):
    """CPUs to reserve per rollout worker: 1, or a share small enough that all of them fit
    on the cluster's nodes when there are fewer CPUs than workers (otherwise Ray would
    leave the extra workers waiting forever; see ``fitting_share``)."""
    if not lazy_ray.initialized():
        return 1.0
    nodes = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"]]
    return fitting_share(nodes, num_actors)


def actor_options(**options):
    """Ray actor options for ddrl's actors: ``options`` and whether their calls' task events
    are recorded (their methods inherit the actor's setting)."""
    return dict(options, enable_task_events=_TASK_EVENTS["enabled"])


class Placement:
    def __init__(self, local: bool):
        self.local = local

    def spawn(self, cls, *args, num_cpus=1.0, num_gpus=0.0, **kwargs):
        """``cls(*args, **kwargs)`` here, or as a Ray actor on the driver's node when it has
        room (the run's core actors: on a cluster, losing another node then costs only
        rollout workers, which are replaced, not a recovery from checkpoint)."""
        if self.local:
            return LocalHandle(cls(*args, **kwargs))
        return remote_class(cls).options(**actor_options(
            num_cpus=num_cpus, num_gpus=num_gpus, scheduling_strategy=near_driver())
        ).remote(*args, **kwargs)

    def share(self, weights):
        """Weights for many actors. Large ones go into the object store once and travel by
        reference. Small ones travel inline in each call: Ray inlines arguments under 100 KB,
        and on our machines a ray.put cost more than inlining a 40 KB model into two calls
        (BENCHMARKS.md, "Per-call costs behind the design"; benchmarks/probe.py overheads)."""
        if self.local:
            return LocalRef(weights)
        if sum(np.asarray(v).nbytes for v in weights.values()) <= INLINE_WEIGHTS_MAX_BYTES:
            return weights
        return ray.put(weights)

    def get(self, refs):
        if self.local:
            return [r.value for r in refs] if isinstance(refs, list) else refs.value
        return ray.get(refs)

    def wait_any(self, refs, timeout=None):
        """The refs among ``refs`` that are done, waiting for at least one (or ``timeout`` s)."""
        if not refs:
            return []
        if self.local:
            return list(refs)
        done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        # Take everything else that is already done too, without waiting.
        more, _ = ray.wait([r for r in refs if r not in done], num_returns=len(refs) - len(done),
                           timeout=0) if len(refs) > len(done) else ([], [])
        return done + more

    def ready(self, ref) -> bool:
        """True when ``ref`` is computed (never blocks)."""
        if self.local:
            return True
        done, _ = ray.wait([ref], timeout=0)
        return bool(done)


def spread(node=None):
    """Ray scheduling strategy for rollout workers: SPREAD over the nodes (losing one node then
    costs the fewest), or ``node`` if it has room (a replacement's: core/sampling/worker_group.py picks
    it), or the current placement group when there is one (a sweep's trial)."""
    from ray.util.placement_group import get_current_placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    if get_current_placement_group() is not None:
        return near_driver()
    if node is not None:  # there if it has room now, else anywhere (never wait for it)
        return NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
    return "SPREAD"


def free_cpus_per_node():
    """{node id: CPUs free now} for the live nodes that have CPUs, as the GCS sees them (a
    node lost seconds ago may still be listed)."""
    live = {n["NodeID"]: n.get("Resources", {}).get("CPU", 0) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0}
    try:  # Ray has no public per-node view of free resources without the dashboard
        from ray._private.state import available_resources_per_node
        available = available_resources_per_node()
    except Exception:  # noqa: BLE001 - another Ray: fall back to the totals
        return live
    return {node: available.get(node, {}).get("CPU", 0.0) for node in live}


def actor_node(handle):
    """The id of the Ray node an actor was placed on (also after it died), or None when it
    never was or this Ray cannot say."""
    try:  # the GCS actor table; Ray's public state API needs the dashboard
        from ray._private.state import actors
        node = actors(handle._actor_id.hex()).get("Address", {}).get("NodeID")
    except Exception:  # noqa: BLE001
        return None
    return node if node and node.strip("0") else None


def near_driver():
    """Ray scheduling strategy: the driver's node if it has room, else anywhere. Inside a
    placement group (a sweep's trial: Tune reserved its CPUs as one), in that group."""
    from ray.util.placement_group import get_current_placement_group
    from ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                                PlacementGroupSchedulingStrategy)
    group = get_current_placement_group()
    if group is not None:
        return PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)


def start_ray(args, staged=None):
    """Start a local Ray instance bound to 127.0.0.1, or join a cluster with --address.
    Returns False when Ray was up already (a sweep's trial runs inside a Ray worker): then
    whoever started it shuts it down. ``staged``, a list, gets the folder an installed ddrl
    copies its packages into for the join, so that a process ending while ray.init still
    uploads it can remove it (RayStarter.stop)."""
    if lazy_ray.initialized():
        return False
    loopback.prepare(args.node_ip_address)
    common = dict(include_dashboard=bool(args.dashboard), logging_level="WARNING",
                  log_to_driver=True)
    if args.dashboard:
        common["dashboard_host"] = args.dashboard_host
    if args.address:
        check_address_answers(args)
        # only an installed ddrl stages a copy (a checkout goes as it is); ray.init uploads
        # the job's files before it returns, so the copy can go then
        staging = None if is_checkout() else tempfile.mkdtemp(prefix="ddrl-job-")
        if staging and staged is not None:
            staged.append(staging)
        try:
            ray.init(address=args.address, runtime_env=code_runtime_env(args, staging),
                     **common)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise join_error(args, exc) from exc
        finally:
            if staging:
                shutil.rmtree(staging, ignore_errors=True)
        check_joined_gpus(args)
        return True
    # Local workers inherit this environment: make a checkout importable in them (an installed
    # ddrl is in their site-packages already; putting those ahead of the standard library
    # could shadow it).
    path = os.environ.get("PYTHONPATH", "")
    if is_checkout() and REPO_ROOT not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, path) if p)
    hook = ddrl_first_hook()
    if hook is not None:
        common["runtime_env"] = {"worker_process_setup_hook": hook}
    # address="local": always a new instance, never one that happens to run on this machine.
    ray.init(address="local", num_cpus=args.num_cpus, num_gpus=args.num_gpus,
             _node_ip_address=args.node_ip_address, **common)
    return True


#: ddrl's top-level packages (the seed's layout; ddrl/__init__.py checks the driver's)
TOP_LEVEL = ("core", "envs", "models", "agents", "options", "loggers")


def ddrl_first_hook(cwd=None):
    """None, or a function for Ray's worker_process_setup_hook when the working directory
    holds a package named as one of ddrl's (a project's own models/): Ray puts the driver's
    working directory first on every local worker's sys.path, so a worker would import that
    package instead of ddrl's and die starting. The function, pickled by value (nothing of
    ddrl is imported to run it), makes those names resolve in ddrl's root first. Only then:
    a runtime_env is not free for Ray's worker start."""
    cwd = os.path.abspath(cwd or os.getcwd())
    if cwd == REPO_ROOT or not any(os.path.exists(os.path.join(cwd, name))
                                   or os.path.exists(os.path.join(cwd, name + ".py"))
                                   for name in TOP_LEVEL):
        return None
    root, names = REPO_ROOT, TOP_LEVEL

    def put_ddrl_first():
        # Ray adds the driver's directories to sys.path after this hook runs: so not a place
        # on sys.path but a finder ahead of the others, for ddrl's top-level names only
        # (their submodules follow their package's own __path__)
        import importlib.machinery
        import sys as _sys

        class DdrlFirst:
            @staticmethod
            def find_spec(name, path=None, target=None):
                if path is None and name in names:
                    return importlib.machinery.PathFinder.find_spec(name, [root])
                return None
        _sys.meta_path.insert(0, DdrlFirst)
    return put_ddrl_first


def join_error(args, reason):
    return ConfigError(
        f"cannot join the Ray cluster at --address {args.address!r}: {reason}. Start one "
        f"with `python -m ddrl.cluster start --head --port PORT` (README, 'Scaling "
        f"out'), give this machine's node address with --node_ip_address (now "
        f"{args.node_ip_address}), set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH when the "
        f"head's token is not in ~/.ray/auth_token, or leave --address out to start a "
        f"local instance.")


def check_address_answers(args, timeout=3.0):
    """Raise join_error at once when nothing listens at --address HOST:PORT. ray.init would
    retry for over a minute, and a run that learns in this process meanwhile (an elastic
    start) would end, or go on for minutes, on this machine alone with no word of the
    cluster. Other forms Ray takes ("auto", "ray://...") are left to ray.init."""
    import socket
    host, sep, port = args.address.rpartition(":")
    if not sep or not host or "://" in args.address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise join_error(args, f"nothing answers at {host}:{port} "
                               f"({exc.strerror or type(exc).__name__})") from None


#: ddrl's own packages and its presets (pyproject.toml's): what an installed ddrl sends to a
#: cluster's nodes
PACKAGES = ("core", "envs", "models", "agents", "options", "loggers", "ddrl", "configs")


def is_checkout(root=REPO_ROOT):
    """True where ddrl runs from its source tree (a clone, or an editable install of one);
    False where it was installed from a wheel (``root`` is then site-packages)."""
    return os.path.isfile(os.path.join(root, "pyproject.toml"))


def code_runtime_env(args, staging, root=REPO_ROOT):
    """What travels to a cluster's nodes with the job, as its working directory: a checkout
    whole (less its venv, runs and results), or, from an installed ddrl, a copy of its own
    packages and presets made in ``staging`` (site-packages whole would send torch along), laid
    out as in a checkout: a sweep's trial on a node finds the presets beside options/ there.
    --user_dir's plugins travel beside it (py_modules)."""
    if is_checkout(root):
        runtime_env = {"working_dir": root,
                       "excludes": [".venv", "runs", ".git", "benchmarks/results", "*.pt"]}
    else:
        for name in PACKAGES:
            shutil.copytree(os.path.join(root, name), os.path.join(staging, name),
                            ignore=shutil.ignore_patterns("__pycache__"))
        runtime_env = {"working_dir": staging}
    if args.user_dir:
        runtime_env["py_modules"] = [os.path.abspath(args.user_dir)]
    return runtime_env


def check_joined_gpus(args):
    """--num_gpus counts the joined cluster's GPUs: asking for more would leave the GPU actors
    waiting forever, so say so now (and leave the cluster as it was)."""
    if not args.num_gpus:
        return
    try:
        check_cluster_gpus(args.num_gpus, ray.cluster_resources().get("GPU", 0), args.address)
    except ConfigError:
        ray.shutdown()  # only disconnects this driver: the cluster keeps running
        raise


class _DropThreadWarning(logging.Filter):
    """ray.init outside the main thread warns that it leaves SIGTERM alone: ddrl wants exactly
    that (the run's own handler stays in charge), so the line is noise."""

    def filter(self, record):
        return "SIGTERM handler is not set" not in record.getMessage()


class RayStarter:
    """Starts Ray (``start_ray``) in a background thread, so the driver can learn with an
    in-process worker meanwhile (about 4.5 s for ray.init on the project's 2-core machines).

    The thread stays alive until ``stop()``: Ray starts its GCS and raylet with a parent-death
    signal, which Linux ties to the thread that started them (measured here: when the starting
    thread returned, the GCS died and the next actor call failed after 60 s).
    """

    def __init__(self, args, nice=0):
        if args.address:
            check_address_answers(args)  # here, in the main thread, before any learning
        self.args = args
        self.nice = nice
        self.error = None
        self.started = False  # this process started (or joined) Ray, so it shuts it down
        self._noted = False
        self._up = threading.Event()
        self._stop = threading.Event()
        self.staged = []  # start_ray's copy of an installed ddrl for the join, while it lasts
        logging.getLogger("ray._private.worker").addFilter(_DropThreadWarning())
        self.thread = threading.Thread(target=self._run, name="ddrl-ray-start", daemon=True)
        self.thread.start()

    def _run(self):
        if self.nice:
            # Niceness is per thread on Linux and inherited by what the thread starts: Ray's
            # processes then yield the CPUs to the learning that goes on in this process.
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        try:
            self.started = start_ray(self.args, self.staged)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by ready()
            self.error = exc
        finally:
            self._up.set()
        self._stop.wait()

    def ready(self, timeout=0.0) -> bool:
        """True once Ray is up, waiting up to ``timeout`` s (None: until it is); re-raises a
        failed start."""
        up = self._up.wait(timeout) if timeout != 0 else self._up.is_set()
        if up and self.error is not None:
            error, self.error = self.error, None
            raise error
        return up

    def note_if_not_joined(self):
        """A run that learned in this process while joining --address and ended first says so
        (once): its results are this machine's alone."""
        if self.args.address and not self._up.is_set() and not self._noted:
            self._noted = True
            print(f"ddrl: the run ended before the cluster at --address {self.args.address} "
                  f"was joined: it ran in this process only", file=sys.stderr, flush=True)

    def stop(self):
        """Shut Ray down if this process started it, then let the thread end. A local start
        is waited for (it takes seconds; Ray's processes must not outlive it half-made); joining
        --address is not: a connect that hangs ends with this process."""
        if not self.args.address:
            self._up.wait(120)
        else:
            self.note_if_not_joined()
            if not self._up.is_set():  # this process ends before ray.init's own clean-up
                for staging in self.staged:
                    shutil.rmtree(staging, ignore_errors=True)
        if lazy_ray.initialized() and not self.args.address and self.started:
            ray.shutdown()
        self._stop.set()
