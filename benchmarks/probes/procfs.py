"""What the probes read from /proc: a process's CPU seconds, title and memory, and the machine's
busy, idle and stolen time."""
import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """CPU seconds (user + system) the process has used, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    except (OSError, ValueError, IndexError):
        return None


def machine_times():
    """CPU seconds of all cores so far: busy (user, nice, system, irq, softirq), idle (idle,
    iowait), and stolen by the hypervisor (steal), from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    return dict(busy=(user + nice + system + irq + softirq) / CLOCK_TICKS,
                idle=(idle + iowait) / CLOCK_TICKS, steal=steal / CLOCK_TICKS)


def title_of(pid):
    """argv[0] of the process, shortened: ray::X.method -> ray::X, a python script -> its name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    first = argv[0].split()[0] if argv[0].strip() else argv[0]
    if first.startswith("ray::"):
        return first.split(".")[0].rstrip("()")
    base = os.path.basename(first)
    if base.startswith("python"):
        script = next((os.path.basename(a) for a in argv[1:] if a.endswith(".py")), None)
        if script:
            return script
        if "-m" in argv[:-1]:
            return "python -m " + argv[argv.index("-m") + 1]
    return base


def memory_of(pid):
    """{rss, anon, shmem} in bytes from /proc/PID/status, or None when the process is gone."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssShmem:": "shmem"}
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in fields:
                    found[fields[parts[0]]] = int(parts[1]) * 1024  # kB
    except (OSError, ValueError):
        return None
    return found if "rss" in found else None
