"""A run that ends when it is done: the plot process (core/run/plots.py), killing this process's
descendants (core/process_tree.py), and main.py leaving with no Ray process behind."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from core.process_tree import descendants, kill_descendants
from core.run.plots import FILE_NAME, LearningCurves, PlotProcess

pytestmark = pytest.mark.contract

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def marked_processes(mark):
    """Processes whose environment holds DDRL_TEST_MARK=mark: every process a run started
    inherits it (Ray's GCS, raylet and workers, the plot process)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if f"DDRL_TEST_MARK={mark}".encode() in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def state(pid):
    """A process's state letter (R, S, D, Z, ...) from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def test_kill_descendants_ends_children_and_grandchildren():
    script = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 10
    while not descendants(child.pid) and time.time() < deadline:  # the grandchild is up
        time.sleep(0.05)
    below = set(descendants(child.pid))
    assert below and child.pid in descendants()
    # (below the child only: this pytest process may hold a Ray instance of other tests)
    assert kill_descendants(child.pid) == len(below)
    child.kill()
    child.wait(timeout=5)
    time.sleep(0.2)
    assert not below & set(descendants())


def test_kill_descendants_returns_when_the_killed_have_finished_exiting(tmp_path):
    """A SIGKILL is delivered at once, the kernel's teardown is not: a killed process holding
    half a GiB still runs for tens of milliseconds (its memory and ports still held). The
    grandchild here is a zombie or gone when kill_descendants returns, not still exiting."""
    ready = tmp_path / "ready"
    holder = ("import sys, time; held = bytearray(b'x' * (1 << 29)); "
              "open(sys.argv[1], 'w').close(); time.sleep(60)")
    script = ("import subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {holder!r}, sys.argv[1]]); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", script, str(ready)])
    try:
        deadline = time.time() + 30
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.02)
        (grandchild,) = descendants(child.pid)
        assert kill_descendants(child.pid) == 1
        assert state(grandchild) in (None, "Z"), "still exiting"
    finally:
        child.kill()
        child.wait(timeout=5)


def test_the_plot_process_draws_and_a_dead_one_falls_back_to_this_process(tmp_path):
    rows = [{"env_steps": 1000 * i, "wall_time_s": float(i), "train_return": 10.0 * i,
             "eval_return": 20.0 * i, "eval_return_std": 1.0} for i in range(1, 5)]
    plotter = PlotProcess()
    curves = LearningCurves(str(tmp_path), 50.0, plotter=plotter)
    for row in rows:
        curves.add(row)
    assert curves.maybe_draw(force=True)
    assert (tmp_path / FILE_NAME).stat().st_size > 10_000
    (tmp_path / FILE_NAME).unlink()
    plotter.process.kill()
    plotter.process.wait(timeout=5)
    curves.add({**rows[-1], "env_steps": 5000})
    assert curves.maybe_draw(force=True)       # drawn here instead
    assert curves.plotter is None and (tmp_path / FILE_NAME).exists()
    curves.close()


GROUP_SIGINT_DRIVER = """
import signal, sys, threading
from core.run.plots import PlotProcess
interrupted = threading.Event()
signal.signal(signal.SIGINT, lambda *_: interrupted.set())
plotter = PlotProcess()
rows = [{"env_steps": 1000 * i, "wall_time_s": float(i), "train_return": 1.0 * i,
         "eval_return": 2.0 * i, "eval_return_std": 0.1} for i in range(1, 4)]
assert plotter.draw(sys.argv[1] + "/first.png", rows, None, "t", wait=True)  # imported, serving
print("ready", flush=True)
interrupted.wait(60)
print("drawn after the Ctrl-C:", plotter.draw(sys.argv[1] + "/last.png", rows, None, "t",
                                              wait=True), flush=True)
plotter.close()
"""


def test_a_ctrl_c_to_the_drivers_group_leaves_the_plot_process_drawing(tmp_path):
    """Ctrl-C in a terminal signals the whole foreground process group; the driver stops after
    a round and then asks for the last drawing, which the plot process (a session of its own)
    still makes, with no KeyboardInterrupt traceback of its own on the terminal."""
    driver = subprocess.Popen([sys.executable, "-c", GROUP_SIGINT_DRIVER, str(tmp_path)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)  # a group as a terminal's
    try:
        assert driver.stdout.readline().strip() == "ready", driver.stderr.read()
        os.killpg(driver.pid, signal.SIGINT)
        out, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
    assert driver.returncode == 0, err
    assert out.strip() == "drawn after the Ctrl-C: True", (out, err)
    assert "KeyboardInterrupt" not in err, err
    assert (tmp_path / "last.png").stat().st_size > 10_000


@pytest.mark.e2e
def test_main_leaves_at_once_with_no_ray_process_behind(tmp_path):
    """The default loop with 2 Ray workers, to a budget: after main.py exits, not one process
    it started is left (Ray's were killed, not shut down one by one), and what must be durable
    is there: summary.json, the final checkpoint, the plot."""
    mark = uuid.uuid4().hex
    run_dir = tmp_path / "run"
    started = time.time()
    result = subprocess.run(
        [sys.executable, "main.py", "--config", "none", "--num_workers", "2",
         "--total_steps", "2048", "--target_return", "none", "--eval_interval", "1024",
         "--run_dir", str(run_dir), "--quiet", "--plots"],
        cwd=ROOT, env={**os.environ, "DDRL_TEST_MARK": mark}, capture_output=True, text=True,
        timeout=300)
    exited = time.time()
    assert result.returncode == 0, result.stderr[-2000:]
    assert marked_processes(mark) == [], "processes of the run left behind"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_because"] == "total_steps"
    assert (run_dir / "checkpoints" / "last.pt").exists()
    assert (run_dir / FILE_NAME).stat().st_size > 10_000
    # the run's own clock ends before the process does; what is between is the leaving
    assert exited - started >= summary["wall_time_s"]
