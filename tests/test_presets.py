"""Every preset in configs/ runs as given (its own workers, networks and loop), on a tiny
budget; BENCHMARKS.md names the preset behind each figure."""
import glob
import os

import pytest

from test_e2e import REPO, read_run, run_main

pytestmark = pytest.mark.e2e

PRESETS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))


@pytest.mark.parametrize("preset", PRESETS, ids=os.path.basename)
def test_preset_runs(tmp_path, preset):
    run_dir = str(tmp_path / "run")
    proc = run_main("--config", preset, "--total_steps", "600", "--eval_interval", "300",
                    "--eval_episodes", "1", "--target_return", "none", "--run_dir", run_dir,
                    "--quiet", "--no-tensorboard")
    assert proc.returncode == 0, proc.stderr
    summary, rows = read_run(run_dir)
    assert summary["env_steps"] >= 600 and rows


@pytest.mark.contract
def test_benchmarks_md_names_every_preset():
    with open(os.path.join(REPO, "BENCHMARKS.md")) as f:
        text = f.read()
    for preset in PRESETS:
        assert f"configs/{os.path.basename(preset)}" in text, preset
