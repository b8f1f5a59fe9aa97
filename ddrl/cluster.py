"""Start and stop Ray cluster nodes on this machine's loopback, for ``main.py --address``.

    python -m ddrl.cluster start --head --port 6399 --num-cpus 1      # the head
    python -m ddrl.cluster start --address 127.0.0.1:6399 --num-cpus 1  # one more node
    python -m ddrl.cluster stop --address 127.0.0.1:6399               # all of that cluster

``start`` is Ray's own ``ray start`` (every option of it is accepted) with the node address
pinned to ``--node-ip-address`` (default 127.0.0.1) and token authentication on: plain ``ray
start`` would register the node under the machine's outward address and listen on every
interface (core/distributed/loopback.py says why). ``stop`` ends the processes of the one cluster whose
GCS listens on the given port, and their children, and nothing else; ``ray stop`` would end
every Ray process of this user on the machine, other runs' included.
"""
import os
import sys

if __package__ in (None, ""):  # run as a file (python /path/to/ddrl/cluster.py), from any cwd:
    _HERE = os.path.dirname(os.path.abspath(__file__))  # its neighbours must not shadow modules
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    sys.path.insert(0, os.path.dirname(_HERE))  # the repository

import argparse
import re
import signal
import time

from core.distributed import loopback

_USAGE = __doc__.split("\n\n")[0]


def start(ray_args):
    given = [a.split("=", 1)[1] for a in ray_args if a.startswith("--node-ip-address=")]
    if "--node-ip-address" in ray_args:
        ip = ray_args[ray_args.index("--node-ip-address") + 1]
    elif given:
        ip = given[0]
    else:
        ip = loopback.LOOPBACK
        ray_args = ray_args + ["--node-ip-address", ip]
    if "--disable-usage-stats" not in ray_args:
        ray_args = ray_args + ["--disable-usage-stats"]  # no report sent off the machine
    loopback.prepare(ip)
    if "--head" in ray_args:
        loopback.ensure_token()
    from ray.scripts.scripts import main as ray_main
    sys.argv = ["ray", "start"] + ray_args
    return ray_main()


def process_table():
    """{pid: (parent pid, command line)} for every process we may see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        table[int(entry)] = (ppid, cmdline)
    return table


def cluster_processes(port, table=None):
    """Pids of the cluster whose GCS listens on ``port``: processes naming its session or its
    GCS address on their command lines, and all their descendants."""
    table = table if table is not None else process_table()
    gcs = [cmd for _, cmd in table.values()
           if "gcs_server" in cmd and f"--gcs_server_port={port} " in cmd + " "]
    if not gcs:
        return []
    # Ray's own processes name the GCS as --gcs-address=HOST:PORT (the client server as
    # --address=HOST:PORT); a driver's "--address HOST:PORT" is not the cluster's to stop.
    own = re.compile(rf"--(gcs-)?address=[^ ]+:{port}(?!\d)")
    session = [a.split("=", 1)[1] for a in gcs[0].split() if a.startswith("--session-name=")]
    pids = {pid for pid, (_, cmd) in table.items()
            if own.search(cmd) or (session and session[0] in cmd)}
    pids |= descendants(pids, table)  # Ray's workers rename themselves "ray::..."
    pids.discard(os.getpid())
    return sorted(pids)


def descendants(pids, table=None):
    """Every process below ``pids`` (children, their children, ...)."""
    table = table if table is not None else process_table()
    found, frontier = set(), set(pids)
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def stop(address, grace_s=10.0):
    port = int(address.rsplit(":", 1)[1])
    pids = cluster_processes(port)
    if not pids:
        print(f"ddrl: no Ray cluster with its GCS on port {port} runs on this machine",
              file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.2)
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        if not pids:
            break
    print(f"ddrl: stopped the Ray cluster at {address}")
    return 0


def main(argv=None, prog="python -m ddrl.cluster"):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["start"]:
        return start(argv[1:])
    parser = argparse.ArgumentParser(prog=prog, usage=_USAGE.replace("python -m ddrl.cluster",
                                                                     prog))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start", help="ray start, on 127.0.0.1 with token auth (any ray start option)")
    stop_parser = sub.add_parser("stop", help="stop one cluster's processes on this machine")
    stop_parser.add_argument("--address", required=True, help="HOST:PORT of its GCS (the head)")
    args = parser.parse_args(argv)
    return stop(args.address)


if __name__ == "__main__":
    sys.exit(main())
