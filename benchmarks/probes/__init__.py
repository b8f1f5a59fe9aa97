"""The probes of benchmarks/probe.py, one module each: ``add_args(parser)`` gives its flags and
``run(args, argv)`` measures (argv: the command line after probe.py, recorded with the results).

Heavy imports (torch, ray, gymnasium, the peer libraries, the repository's packages) stay inside
the functions that use them: probe.py imports every module to build its subcommands, so that
``probe.py -h`` and the probes that need none of them start at once, and a missing peer library
fails only the probe that needs it."""
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
REPO = os.path.dirname(HERE)
PROBE = os.path.join(HERE, "probe.py")
for _path in (REPO, HERE):  # the repository's packages, and compare.py, scaling.py, sb3_*.py
    if _path not in sys.path:
        sys.path.insert(0, _path)


def command(argv):
    """The command line as recorded in a results JSON (relative to the repository root)."""
    return " ".join(["benchmarks/probe.py", *argv])


def child(*argv):
    """argv of a child process running a probe's hidden one-measurement mode (torch's thread
    pool is set once per process, so each configuration gets a process of its own)."""
    return [sys.executable, PROBE, *argv]


def git_commit():
    """HEAD's short hash, or None outside a git checkout."""
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
