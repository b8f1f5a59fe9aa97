"""This process's descendants, from /proc: what a local Ray instance started (its GCS, raylet,
dashboard and worker processes), so that a run can end them at once instead of waiting seconds
for ``ray.shutdown()`` to end them one by one (main.py). Linux only; elsewhere nothing is found
and Ray's own shutdown at interpreter exit does the work."""
import os
import signal


def _parents():
    """{pid: parent pid} of every process visible in /proc."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            parents[int(entry)] = int(fields[1])
    return parents


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


def kill_descendants(pid=None):
    """SIGKILL every process below ``pid`` (default: this one); returns how many. They are all
    stopped first (listed again until no new one appears), so none starts another meanwhile and
    the tree stays whole until the kill."""
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
    return len(stopped)


def _send(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:  # ended meanwhile
        pass
