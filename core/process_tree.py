"""This process's descendants, from /proc: what a local Ray instance started (its GCS, raylet,
dashboard and worker processes), so that a run can end them at once instead of waiting seconds
for ``ray.shutdown()`` to end them one by one (main.py). Linux only; elsewhere nothing is found
and Ray's own shutdown at interpreter exit does the work."""
import os
import signal
import time


def _parents():
    """{pid: parent pid} of every process visible in /proc."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if entry.isdigit():
            fields = _stat(entry)
            if len(fields) > 1:
                parents[int(entry)] = int(fields[1])
    return parents


def _stat(pid):
    """The fields of /proc/<pid>/stat after the command's name (state, ppid, ...); [] when the
    process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:  # ended meanwhile
        return []
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    return stat[stat.rfind(")") + 2:].split()


def descendants(pid=None):
    """The pids of every process below ``pid`` (default: this one), children first."""
    pid = os.getpid() if pid is None else pid
    children = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, frontier = [], [pid]
    while frontier:
        below = [c for p in frontier for c in children.get(p, [])]
        found += below
        frontier = below
    return found


def kill_descendants(pid=None, wait_s=2.0):
    """SIGKILL every process below ``pid`` (default: this one); returns how many. They are all
    stopped first (listed again until no new one appears), so none starts another meanwhile and
    the tree stays whole until the kill. A SIGKILL is delivered at once but the kernel's
    teardown is not: on a busy machine a killed Ray worker still runs, holding its memory and
    ports, for tens of milliseconds. So this returns when every killed process has finished
    exiting (gone, or a zombie that holds nothing), or after ``wait_s``."""
    stopped = []
    while True:
        new = [p for p in descendants(pid) if p not in stopped]
        if not new:
            break
        for child in new:
            _send(child, signal.SIGSTOP)
        stopped += new
    for child in stopped:
        _send(child, signal.SIGKILL)
    _wait_exited(stopped, wait_s)
    return len(stopped)


def _wait_exited(pids, wait_s):
    deadline = time.monotonic() + wait_s
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        # a zombie (Z, X: dead) holds nothing but its entry, until its parent or init reaps it
        pending = [p for p in pending if _stat(p)[:1] not in ([], ["Z"], ["X"])]
        if pending:
            time.sleep(0.002)



def _send(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:  # ended meanwhile
        pass
