"""Every preset in configs/ runs as given (its own workers, networks and loop), on a tiny
budget; BENCHMARKS.md names the preset behind each figure."""
import concurrent.futures
import glob
import os

import pytest

from test_e2e import REPO, read_run, run_main

pytestmark = pytest.mark.e2e

PRESETS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))


@pytest.fixture(scope="module")
def preset_runs(tmp_path_factory):
    """Every preset's tiny run, two at a time: most of one is the interpreter's start and
    imports, on one core, and the machines that run these tests have two. {preset: (the
    CompletedProcess, its run directory)}."""
    base = tmp_path_factory.mktemp("presets")

    def run(preset):
        run_dir = str(base / os.path.basename(preset))
        return run_main("--config", preset, "--total_steps", "600", "--eval_interval", "300",
                        "--eval_episodes", "1", "--target_return", "none", "--run_dir",
                        run_dir, "--quiet", "--no-tensorboard"), run_dir
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(zip(PRESETS, pool.map(run, PRESETS)))


@pytest.mark.parametrize("preset", PRESETS, ids=os.path.basename)
def test_preset_runs(preset_runs, preset):
    proc, run_dir = preset_runs[preset]
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 600 and rows


@pytest.mark.contract
def test_benchmarks_md_names_every_preset():
    with open(os.path.join(REPO, "BENCHMARKS.md")) as f:
        text = f.read()
    for preset in PRESETS:
        assert f"configs/{os.path.basename(preset)}" in text, preset
