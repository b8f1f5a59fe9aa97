"""The tests' warm start of main.py (tests/warm_start.py) gives what a fresh interpreter gives:
exit codes, output, argv, cwd, the environment and sys.path[0] as `python main.py` sets them;
and anything it cannot give falls back to a fresh exec."""
import json
import os
import subprocess
import sys

import pytest

from tests import warm_start

pytestmark = pytest.mark.e2e

REPO = warm_start.REPO
# imported by --user_dir while main.py parses its flags: what the process looks like from inside
PROBE = '''
import json, os, sys
print("PROBE " + json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                             "x": os.environ.get("WARM_START_X"), "ppid": os.getppid(),
                             "main": os.path.abspath(sys.modules["__main__"].__file__)}))
'''


def both(monkeypatch, args, **kwargs):
    """``subprocess.run(args)`` served warm, then fresh: (warm, fresh) CompletedProcesses."""
    warm = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    monkeypatch.setenv("DDRL_TEST_WARM_START", "0")
    fresh = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    monkeypatch.delenv("DDRL_TEST_WARM_START")
    return warm, fresh


def help_text(proc):
    return [line for line in proc.stdout.splitlines() if not line.startswith("PROBE ")]


def probe(proc):
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


@pytest.mark.skipif(not warm_start.enabled(), reason="DDRL_TEST_WARM_START=0")
def test_a_warm_main_py_is_what_a_fresh_one_is(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "probe_plugin.py").write_text(PROBE)
    env = {**os.environ, "WARM_START_X": "42"}
    # relative paths from another directory, as a user types them
    args = [sys.executable, os.path.relpath(os.path.join(REPO, "main.py"), tmp_path),
            "--user_dir", "plugins", "-h"]
    warm, fresh = both(monkeypatch, args, cwd=tmp_path, env=env)
    assert warm.returncode == fresh.returncode == 0, warm.stderr + fresh.stderr
    seen, expected = probe(warm), probe(fresh)
    # the warm one is a fork of this process's warm start server (the one for env's load-time
    # variables), the fresh one its own child
    assert seen.pop("ppid") == warm_start.server(env).process.pid
    assert expected.pop("ppid") == os.getpid()
    assert seen == expected and seen["x"] == "42" and seen["path0"] == REPO, seen
    assert seen["main"] == os.path.join(REPO, "main.py")
    assert help_text(warm) == help_text(fresh) and warm.stderr == fresh.stderr
    assert "--user_dir" in "\n".join(help_text(warm))

    warm, fresh = both(monkeypatch, [sys.executable, "main.py", "--lr", "fast"], cwd=REPO)
    assert warm.returncode == fresh.returncode == 2
    assert warm.stderr == fresh.stderr and "--lr" in warm.stderr


def test_what_a_fork_cannot_give_is_a_fresh_exec():
    main_py = os.path.join(REPO, "main.py")
    assert warm_start._servable([sys.executable, main_py], {}) == warm_start.enabled()
    for args, kwargs in [
        ([sys.executable, "-c", "pass"], {}),                    # not main.py
        ([sys.executable, os.path.join(REPO, "ddrl", "cli.py")], {}),
        (["python3.9", main_py], {}),                            # another interpreter
        ([sys.executable, main_py], {"start_new_session": True}),
        ([sys.executable, main_py], {"preexec_fn": os.getpid}),
        (f"{sys.executable} {main_py}", {"shell": True}),
    ]:
        assert not warm_start._servable(args, kwargs), (args, kwargs)
    proc = subprocess.Popen([sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)
    assert not proc._warm and proc.communicate()[0].strip() == b"1"


@pytest.mark.skipif(not warm_start.enabled(), reason="DDRL_TEST_WARM_START=0")
def test_a_changed_environment_is_served_by_a_server_started_with_it(tmp_path, monkeypatch):
    """A variable read at library load (OMP_NUM_THREADS, as core/distributed/process.py sets
    it in whatever process drives a worker, the test process included) that differs from the
    first server's: the run is still a fork, of a server whose own environment has it. (Once
    such a change sent every later main.py of that test process to a fresh exec: a whole e2e
    tier 25% slower, and the check above failing.)"""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "probe_plugin.py").write_text(
        PROBE.replace('"x": os.environ.get("WARM_START_X")',
                      '"x": os.environ.get("OMP_NUM_THREADS"), "server_omp": open('
                      'f"/proc/{os.getppid()}/environ").read().split("\\0")'))
    args = [sys.executable, os.path.join(REPO, "main.py"), "--user_dir", "plugins", "-h"]
    first = warm_start.server()
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    # a variable of the run's own (as test_exit marks its run's processes) stays the run's
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WARM_START_RUN_ONLY": "1"})
    assert proc.returncode == 0, proc.stderr
    seen = probe(proc)
    assert seen["x"] == "7" and "OMP_NUM_THREADS=7" in seen["server_omp"]  # its server's own
    assert not any(v.startswith("WARM_START_RUN_ONLY") for v in seen["server_omp"])
    assert seen["ppid"] == warm_start.server().process.pid != first.process.pid
    monkeypatch.undo()
    assert warm_start.server() is first  # the first environment's server, still the same
