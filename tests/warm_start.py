"""`python main.py ...` in a test, started as a fork of a warm interpreter.

Most of a tiny main.py run is the interpreter's start: importing torch, Ray, gymnasium and ddrl
costs ~2.5-3 s of CPU (AMD EPYC, AVX2), the run itself often under one, and the end-to-end tier
starts main.py ~220 times. So each test process keeps a *warm start server*: an interpreter
that has imported what main.py imports and nothing else (no torch op, no Ray session, no
thread of its own beyond OpenBLAS's, whose fork handlers ship with it). A test's
``subprocess.run([sys.executable, "main.py", ...])`` or ``Popen`` of the checkout's main.py is
served by a fork of it: a new process with its own pid, its own pipes, its cwd and environment,
``sys.argv``, ``sys.path[0]`` and a new ``__main__`` as ``python main.py`` sets them, and
the interpreter's end as Python's own (non-daemon threads joined, atexit handlers run, streams
flushed; an uncaught KeyboardInterrupt dies by SIGINT). What a fork cannot give
back, the start falls back to a real ``exec`` for: another interpreter or script, a shell,
``preexec_fn``, a new session or process group, ``pass_fds``, another user or umask. The
variables read at import or library load (``PYTHON*``, ``LD_*``, ``OMP_*``, ``MKL_*``,
``OPENBLAS_*``, ``KMP_*``, ``GOMP_*``, ``MALLOC_*``) a fork would keep from its server, so each
set of them asked for gets a server started with it (MAX_SERVERS at most, then exec): a test
that changes them, or in-process code that sets ``OMP_NUM_THREADS`` in the test process
(core/distributed/process.py does), is served as a fresh start with that environment would be.

What differs from a fresh interpreter, knowingly: the modules were imported before the
arguments were parsed (an import-time error shows as the server failing, on the first run),
and every fork shares the server's string-hash seed. ``DDRL_TEST_WARM_START=0`` turns the
whole thing off: every main.py then starts as a fresh interpreter, as a user's would.

The pytest side (``tests/conftest.py``) puts :class:`WarmPopen` in place of
``subprocess.Popen``; everything that is not the checkout's main.py goes through Popen itself.
"""
import atexit
import builtins
import errno
import importlib.machinery
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import types
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN_PY = os.path.join(REPO, "main.py")
#: variables read when the interpreter starts or a library loads: a fork would keep the server's
LOAD_TIME_VARIABLES = ("PYTHON", "LD_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "MALLOC_")
#: what main.py imports before it parses a flag, and Ray, which every run with workers imports
PRELOAD = ("ddrl.cli", "ddrl.session", "ray", "gymnasium")
_REAL_POPEN = subprocess.Popen


def enabled():
    return os.environ.get("DDRL_TEST_WARM_START", "1") != "0"


def _load_time_environment(env):
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME_VARIABLES)}


# -- the server: one per test process ----------------------------------------------------------
def _send(sock, message):
    sock.sendall(json.dumps(message).encode())


def serve(fd):
    """Import PRELOAD, then fork one child per request until the client hangs up. Single
    threaded: SIGCHLD wakes the loop through a pipe, and the loop reaps and reports."""
    sock = socket.socket(fileno=fd)
    sys.path.insert(0, REPO)
    for name in PRELOAD:
        __import__(name)
    del sys.path[0]
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the children and pytest
    while True:
        try:
            ready, _, _ = select.select([sock, wake_read], [], [])
        except InterruptedError:
            continue
        if wake_read in ready:
            try:
                while os.read(wake_read, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(sock)
        if sock in ready:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            if not message:
                return  # the test process is gone
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                sock.close()
                signal.set_wakeup_fd(-1)
                os.close(wake_read)
                os.close(wake_write)
                _run_child(request, fds)  # does not return
            for fd in fds:
                os.close(fd)
            _send(sock, {"id": request["id"], "pid": pid})


def _reap(sock):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = (-os.WSTOPSIG(status) if os.WIFSTOPPED(status)
                else os.waitstatus_to_exitcode(status))
        _send(sock, {"exit": pid, "code": code})


def _run_child(request, fds):
    """In the fork: become ``python SCRIPT ARGS`` and end as that interpreter would."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"][1:]
        try:
            _run_as_main(os.path.abspath(sys.argv[0]))
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            _finish()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - printed as the interpreter prints it
            traceback.print_exc()
            code = 1
        _finish()
    finally:
        os._exit(code)


def _run_as_main(path):
    """Run the script at ``path`` as `python path` runs it: a new ``__main__`` module, its
    ``__file__`` absolute, no spec, ``sys.path[0]`` its directory."""
    sys.path[0] = os.path.dirname(path)
    module = types.ModuleType("__main__")
    module.__file__, module.__cached__, module.__spec__ = path, None, None
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    exec(code, module.__dict__)


def _finish():
    """What Python does at its end: join non-daemon threads, run atexit, flush."""
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


# -- the client ---------------------------------------------------------------------------------
class _Server:
    """A warm start server, started with ``env`` on the first main.py that asks for its
    load-time variables; asked over a SOCK_SEQPACKET pair (one JSON message each, the child's
    stdio fds alongside)."""

    def __init__(self, env):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = _REAL_POPEN(
            [sys.executable, os.path.abspath(__file__), "--serve", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, cwd=REPO, env=env)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.pids, self.exits, self.next_id = {}, {}, 0

    def alive(self):
        return self.process.poll() is None

    def _receive(self, timeout):
        """The messages that came within ``timeout`` seconds into the tables (the lock held)."""
        while select.select([self.sock], [], [], timeout)[0]:
            timeout = 0  # then whatever else is already there
            message = self.sock.recv(1 << 16)
            if not message:
                raise RuntimeError("the warm start server ended: " +
                                   f"exit code {self.process.poll()}")
            message = json.loads(message)
            if "exit" in message:
                self.exits[message["exit"]] = message["code"]
            else:
                self.pids[message["id"]] = message["pid"]

    def spawn(self, argv, cwd, env, fds):
        with self.lock:
            self.next_id += 1
            request_id = self.next_id
            message = json.dumps({"id": request_id, "argv": argv, "cwd": cwd,
                                  "env": env}).encode()
            socket.send_fds(self.sock, [message], fds)
        while True:
            with self.lock:
                if request_id in self.pids:
                    return self.pids.pop(request_id)
                self._receive(0.05)

    def exit_code(self, pid, timeout):
        """The child's return code (Popen's convention), or None if it still runs after
        ``timeout`` seconds (None: wait for it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                if pid not in self.exits:
                    left = 0.05 if deadline is None else deadline - time.monotonic()
                    self._receive(min(0.05, max(0.0, left)))
                if pid in self.exits:
                    return self.exits.pop(pid)
                if deadline is not None and time.monotonic() >= deadline:
                    return None


_servers = {}  # {the load-time variables, sorted: the server started with them}
_server_lock = threading.Lock()
#: servers at once, each an interpreter with torch imported (~0.5 GB): past it, exec
MAX_SERVERS = 4


def server(env=None):
    """The server for ``env``'s load-time variables (default: this process's environment),
    started on first use; None when MAX_SERVERS others run. One per environment, because a
    test may change this process's environment (in-process code setting OMP_NUM_THREADS, as
    core/distributed/process.py does): a run asked for afterwards is served by a server
    started with what it asks for, never by one whose libraries loaded under another."""
    env = dict(os.environ if env is None else env)
    key = tuple(sorted(_load_time_environment(env).items()))
    with _server_lock:
        found = _servers.get(key)
        if found is not None and not found.alive():
            # should not happen: say what ended it, for whoever looks
            warnings.warn(f"the warm start server {found.process.pid} ended (exit code "
                          f"{found.process.returncode}); starting another", stacklevel=2)
            found = None
        if found is None:
            if len(_servers) - (key in _servers) >= MAX_SERVERS:
                return None
            # this process's environment with the run's load-time variables: nothing else of
            # the run's (a test marks its run's processes by a variable of their own)
            own = {k: v for k, v in os.environ.items() if not k.startswith(LOAD_TIME_VARIABLES)}
            found = _servers[key] = _Server({**own, **dict(key)})
        return found


def _servable(args, kwargs):
    """Whether a Popen of ``args`` with ``kwargs`` can be a fork: the checkout's main.py, run
    by this interpreter, asking for nothing only exec gives."""
    if not enabled() or isinstance(args, (str, bytes)) or len(args) < 2:
        return False
    if os.path.realpath(str(args[0])) != os.path.realpath(sys.executable):
        return False
    cwd = os.fspath(kwargs.get("cwd") or os.getcwd())
    if os.path.realpath(os.path.join(cwd, os.fspath(args[1]))) != os.path.realpath(MAIN_PY):
        return False
    if not os.path.isdir(cwd):
        return False  # Popen's own error
    if any(kwargs.get(k) for k in ("shell", "preexec_fn", "start_new_session", "pass_fds",
                                   "user", "group", "extra_groups", "executable")):
        return False
    return kwargs.get("process_group") in (None, -1) and kwargs.get("umask", -1) == -1


class WarmPopen(_REAL_POPEN):
    """subprocess.Popen whose starts of the checkout's main.py are forks of the warm start
    server (the module's docstring); any other command is Popen's own."""

    def __init__(self, args, *positional, **kwargs):
        self._server = None
        # everything past args by keyword, as the tests write it
        if not positional and _servable(args, kwargs):
            env = kwargs.get("env")
            self._server = server(None if env is None else
                                  {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})
        self._warm = self._server is not None
        super().__init__(args, *positional, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, *rest):
        if not self._warm:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds,
                                          cwd, env, startupinfo, creationflags, shell,
                                          p2cread, p2cwrite, c2pread, c2pwrite, errread,
                                          errwrite, *rest)
        stdio = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                 errwrite if errwrite != -1 else 2]
        argv = [os.fspath(a) for a in args]
        environ = {os.fsdecode(k): os.fsdecode(v)
                   for k, v in (os.environ if env is None else env).items()}
        try:
            self.pid = self._server.spawn(argv, os.path.abspath(os.fspath(cwd or os.getcwd())),
                                      environ, stdio)
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _internal_poll(self, _deadstate=None, *rest, **kwargs):
        if not self._warm:
            return super()._internal_poll(_deadstate, *rest, **kwargs)
        if self.returncode is None:
            try:
                code = self._server.exit_code(self.pid, 0)
            except (RuntimeError, OSError):
                code = _deadstate
            if code is not None:
                self.returncode = code
        return self.returncode

    def _wait(self, timeout):
        if not self._warm:
            return super()._wait(timeout)
        if self.returncode is None:
            code = self._server.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode


def install():
    """Popen (and so subprocess.run) serves main.py from the warm start server."""
    subprocess.Popen = WarmPopen


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    try:
        serve(int(sys.argv[2]))
    except OSError as error:
        if error.errno not in (errno.EPIPE, errno.ECONNRESET, errno.EBADF):
            raise
