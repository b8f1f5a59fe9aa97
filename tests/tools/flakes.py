"""Flake detector: run chosen tests N times under a busy-loop load and print the pass count per
test, its time, and the spread of the figures the tests record.

    .venv/bin/python tests/tools/flakes.py --runs 10 -m "chaos or cluster"
    .venv/bin/python tests/tools/flakes.py --runs 10 \\
        tests/test_faults.py::test_ppo_survives_a_sigkilled_rollout_worker
    .venv/bin/python tests/tools/flakes.py --runs 3 --load 0 -m e2e --json flakes.json

Each repetition is one pytest process over all the chosen tests (module fixtures and Ray start
afresh, as in `make test`), while ``--load`` processes spin in a Python busy loop (default 1:
one of the machine's two cores taken, as by a second job on a CI box). A test reports a figure
with pytest's own ``record_property(name, value)`` fixture (for instance the best evaluation
return a learning threshold is checked against): pytest writes it to the JUnit XML file of the
repetition, and this script prints its minimum, median and maximum over the passing and
failing runs, which is the measured margin a threshold's comment quotes.

Exit code: 0 when every test passed every repetition, 1 otherwise.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="*", help="pytest node ids or files (default: tests/)")
    parser.add_argument("-m", "--marker", default=None,
                        help="a pytest marker expression, e.g. 'chaos or cluster'")
    parser.add_argument("-k", "--keyword", default=None, help="a pytest -k expression")
    parser.add_argument("--runs", type=int, default=10, help="repetitions (default 10)")
    parser.add_argument("--load", type=int, default=1,
                        help="busy-loop processes running meanwhile (default 1; 0: none)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one repetition may take before it counts as failed")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--stop_on_failure", action="store_true",
                        help="stop after the first repetition with a failure (its log kept)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: must be >= 1")
    if args.load < 0:
        parser.error(f"--load {args.load}: must be >= 0")
    return args


def start_load(count):
    """``count`` processes spinning in a Python loop (each takes one core when it can)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop_load(procs):
    for proc in procs:
        proc.kill()
        proc.wait()


def pytest_command(args, junit_path):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--junitxml", junit_path, "-o", "junit_family=xunit1"]
    if args.marker:
        command += ["-m", args.marker]
    if args.keyword:
        command += ["-k", args.keyword]
    return command + (args.tests or ["tests"])


def read_junit(path):
    """{node id: {"outcome": passed|failed|skipped, "time": s, "figures": {name: float}}}."""
    results = {}
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        node = f"{module}.py::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        figures = {}
        for prop in case.iter("property"):
            try:
                figures[prop.get("name")] = float(prop.get("value"))
            except (TypeError, ValueError):
                pass
        results[node] = {"outcome": outcome, "time": float(case.get("time", 0.0)),
                         "figures": figures}
    return results


def cpu_flags():
    """What BENCHMARKS.md quotes beside a figure: the CPU model and its vector extensions."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    return f"{model}; {os.cpu_count()} CPUs; " + " ".join(f for f in wanted if f in flags)


def git_commit():
    """The commit the tests ran at, with "+changes" when the work tree differed from it."""
    def git(*args):
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def spread(values):
    if not values:
        return ""
    return (f"min {min(values):.4g}, median {statistics.median(values):.4g}, "
            f"max {max(values):.4g}")


def summarize(tests):
    """{node id: {"passed": n, "runs": n, "time_s": [...], figure name: [...]}} for --json."""
    summary = {}
    for node, rows in sorted(tests.items()):
        entry = {"passed": sum(r["outcome"] == "passed" for r in rows), "runs": len(rows),
                 "time_s": [round(r["time"], 2) for r in rows]}
        for name in sorted({n for r in rows for n in r["figures"]}):
            entry[name] = [r["figures"][name] for r in rows if name in r["figures"]]
        summary[node] = entry
    return summary


def results_json(header, summary):
    """The --json file: the header's keys, then one line per test."""
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in header.items()]
    tests = [f"    {json.dumps(node)}: {json.dumps(entry)}" for node, entry in summary.items()]
    return "{\n" + "\n".join(lines) + '\n  "tests": {\n' + ",\n".join(tests) + "\n  }\n}\n"


def report(tests, runs_done, wall):
    print(f"\n{runs_done} repetition(s), {wall:.0f} s in all at {git_commit()}; {cpu_flags()}")
    width = max([len(t) for t in tests] + [10])
    for node, rows in sorted(tests.items()):
        passed = sum(r["outcome"] == "passed" for r in rows)
        times = [r["time"] for r in rows]
        print(f"{node:<{width}}  {passed}/{len(rows)} passed  time {spread(times)} s")
        names = sorted({n for r in rows for n in r["figures"]})
        for name in names:
            values = [r["figures"][name] for r in rows if name in r["figures"]]
            print(f"{'':<{width}}    {name}: {spread(values)} ({len(values)} runs)")


def main(argv=None):
    args = parse_args(argv)
    commit = git_commit()
    tests = defaultdict(list)
    logs = tempfile.mkdtemp(prefix="flakes-")
    load = start_load(args.load)
    start = time.time()
    runs_done = 0
    try:
        for run in range(args.runs):
            junit = os.path.join(logs, f"run-{run}.xml")
            log = os.path.join(logs, f"run-{run}.log")
            t0 = time.time()
            with open(log, "w") as out:
                try:
                    proc = subprocess.run(pytest_command(args, junit), cwd=REPO, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=args.timeout)
                    code = proc.returncode
                except subprocess.TimeoutExpired:
                    code = "timeout"
            found = read_junit(junit) if os.path.exists(junit) else {}
            for node, result in found.items():
                tests[node].append(result)
            failed = [n for n, r in found.items() if r["outcome"] == "failed"]
            runs_done += 1
            print(f"repetition {run + 1}/{args.runs}: exit {code}, {len(found)} tests, "
                  f"{len(failed)} failed, {time.time() - t0:.0f} s (log {log})"
                  + "".join(f"\n  FAILED {n}" for n in failed), flush=True)
            if not found:
                print(f"  no results: see {log}", flush=True)
            if args.stop_on_failure and (failed or code not in (0, 5)):
                break
    except KeyboardInterrupt:
        print("interrupted: the repetitions so far", flush=True)
    finally:
        stop_load(load)
    wall = time.time() - start
    report(tests, runs_done, wall)
    if args.json:
        with open(args.json, "w") as f:
            f.write(results_json({"command": sys.argv, "commit": commit, "load": args.load,
                                  "runs": runs_done, "cpu": cpu_flags(),
                                  "wall_s": round(wall, 1)}, summarize(tests)))
    all_passed = tests and all(r["outcome"] in ("passed", "skipped")
                               for rows in tests.values() for r in rows)
    return 0 if all_passed and runs_done == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
