"""Where a command's CPU goes: run it, read every process's CPU time from /proc every 0.2 s
while it runs, and print the totals by kind of process (Ray actors by class, Ray's own
processes, main.py runs forked from the tests' warm servers, other scripts). Linux only.

    .venv/bin/python tests/tools/cpu_by_process.py .venv/bin/python -m pytest -q -n 2 \\
        --dist loadfile -m e2e tests

A process is counted from the first time it is seen (processes already running count only
what they use after the start), to the last time it is read: one that lives less than 0.2 s
may be missed, and one that exits loses at most its last 0.2 s. Its kind is the most specific
name seen in its life (a Ray worker becomes ``ray::ClassName`` once it hosts an actor; a zombie
keeps the kind it had).
"""
import collections
import os
import re
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
NAMED = ("gcs_server", "raylet", "dashboard/agent", "log_monitor", "runtime_env",
         "dashboard.py", "monitor.py", "main.py", "gpu_check", "bin/ddrl", "warm_start")
NO_COMMAND = "(no command line: a kernel thread or a zombie)"


def kind(command):
    if "-m pytest" in command:
        return "pytest"
    actor = re.search(r"ray::(\w+)", command)
    if actor:
        return "ray::" + actor.group(1)
    if "default_worker.py" in command:
        return "ray idle worker"
    for name in NAMED:
        if name in command:
            return name
    return command[:70] if command else NO_COMMAND


def read(pid):
    """(CPU seconds, start time in ticks, command line) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / HZ, fields[19], command


def main(command):
    seen, before = {}, {}  # (pid, start) -> [kind, CPU s]; CPU s at the first poll
    child = subprocess.Popen(command)
    first, me = True, os.getpid()
    while child.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            got = None if int(pid) == me else read(pid)
            if got is None:
                continue
            cpu, start, line = got
            key, name = (pid, start), kind(line)
            if first:
                before[key] = cpu
            old = seen.get(key)
            if old and ((old[0].startswith("ray::") and not name.startswith("ray::"))
                        or name == NO_COMMAND):
                name = old[0]
            seen[key] = [name, cpu - before.get(key, 0.0)]
        first = False
        time.sleep(0.2)
    totals, counts = collections.Counter(), collections.Counter()
    for name, cpu in seen.values():
        totals[name] += cpu
        counts[name] += 1
    print(f"CPU s in all: {sum(totals.values()):.1f} in {sum(counts.values())} processes")
    for name, cpu in totals.most_common(40):
        print(f"{cpu:8.1f} {counts[name]:4d}  {name}")
    return child.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
