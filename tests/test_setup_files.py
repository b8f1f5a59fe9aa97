"""The set-up files agree: requirements.txt and ray.yml pin the same packages; make targets."""
import os
import re
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.contract

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name):
    with open(os.path.join(REPO_ROOT, name)) as f:
        return f.read()


def requirements():
    lines = (line.split("#", 1)[0].strip() for line in read("requirements.txt").splitlines())
    return [line for line in lines if line]


def ray_yml_pip():
    conda = yaml.safe_load(read("ray.yml"))
    pips = [d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, "ray.yml has one pip: list"
    return [str(p).strip() for p in pips[0]]


def test_ray_yml_pip_list_equals_requirements_txt():
    assert requirements()  # the parse found something to compare
    assert sorted(ray_yml_pip()) == sorted(requirements())


def test_torch_is_pinned_to_2_13_0_in_both():
    for listing in (requirements(), ray_yml_pip()):
        torch = [r for r in listing if re.match(r"torch\b(?![-_])", r)]
        assert torch == ["torch==2.13.0"]


def test_every_requirement_is_pinned_exactly():
    for requirement in requirements():
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[0-9][0-9A-Za-z.+]*",
                            requirement), requirement


def test_makefile_has_setup_run_and_test_targets():
    targets = set(re.findall(r"^([A-Za-z_][\w\-]*)\s*:(?!=)", read("Makefile"), re.MULTILINE))
    assert {"setup", "run", "test", "test-fast"} <= targets


def test_make_test_runs_every_tier_exactly_once():
    """`make test` splits the suite into pytest runs by tier (two at a time or one at a time):
    together their -m expressions must select each tier once, none twice, none left out."""
    from tests.conftest import TIERS
    recipe = read("Makefile").split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    expressions = [quoted or bare for quoted, bare in
                   re.findall(r'pytest .*-m (?:"([^"]+)"|(\w+))', recipe)]
    assert expressions, recipe
    for tier in TIERS:
        chosen = [e for e in expressions if eval(e, {}, {t: t == tier for t in TIERS})]
        assert len(chosen) == 1, (tier, expressions)


def collected(*pytest_args):
    """Node ids pytest collects from tests/test_atari.py (a module of several tiers)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *pytest_args,
                           os.path.join(REPO_ROOT, "tests", "test_atari.py")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line}


def test_a_tier_selects_exactly_its_tests_whatever_the_module_says():
    """test_atari's module is unit; its two main.py tests are marked e2e: -m unit must not pick
    them up through the module's mark (tests/conftest.py keeps one tier per test)."""
    every = collected()
    e2e = collected("-m", "e2e")
    fast = collected("-m", "unit or contract")
    assert e2e == {"test_minus_h_shows_the_atari_and_encoder_flags",
                   "test_ppo_trains_on_breakout_end_to_end_with_a_plugin_cnn_model"}
    assert fast == every - e2e and fast


def test_a_test_without_a_tier_is_refused(tmp_path):
    (tmp_path / "conftest.py").write_text(read(os.path.join("tests", "conftest.py")))
    (tmp_path / "test_untiered.py").write_text("def test_nothing():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-c", os.path.join(REPO_ROOT, "pytest.ini"),
                           "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "test_untiered.py::test_nothing" in proc.stderr + proc.stdout
    assert "without a tier" in proc.stderr + proc.stdout


def test_ci_runs_make_test():
    path = os.path.join(REPO_ROOT, ".ci", "run")
    assert os.access(path, os.X_OK)
    commands = [line.strip() for line in read(".ci/run").splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert "make test" in commands


@pytest.mark.e2e
def test_an_installed_wheel_carries_the_presets(tmp_path):
    """`pip install .` or from git (not editable): the wheel holds configs/ beside options/, so
    an installed ddrl lists and applies the presets as a checkout does (before, it applied none:
    SAC on Pendulum-v1 got 2 Ray workers and 1,000 warm-up steps instead of the preset's 0 and
    256). Built from a copy of the tracked files (a build in the checkout would leave build/ and
    ddrl.egg-info/ there) and run from the unpacked wheel outside the checkout."""
    source, unpacked, elsewhere = (tmp_path / name for name in ("source", "site", "elsewhere"))
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if os.path.isfile(os.path.join(REPO_ROOT, name)):  # a tracked file deleted in the tree
            os.makedirs(os.path.dirname(source / name), exist_ok=True)
            with open(os.path.join(REPO_ROOT, name), "rb") as f:
                (source / name).write_bytes(f.read())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, timeout=300)
    [wheel] = (tmp_path / "wheel").iterdir()
    import zipfile
    zipfile.ZipFile(wheel).extractall(unpacked)
    elsewhere.mkdir()
    # the unpacked wheel ahead of the editable install (its finder comes after sys.path)
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    check = ("import options.options as o; from options.options import parse_args; "
             "a = parse_args(['--model_name', 'sac', '--gym_id', 'Pendulum-v1']); "
             "print(o.__file__, a.config, a.num_workers, a.learning_starts)")
    proc = subprocess.run([sys.executable, "-c", check], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, preset, workers, warmup = proc.stdout.split()
    assert where.startswith(str(unpacked)), where
    assert preset == str(unpacked / "configs" / "sac-Pendulum-v1.yaml")
    assert (workers, warmup) == ("0", "256")
    listing = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['ddrl', 'list']; "
                              "from ddrl.cli import main; main()"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr[-2000:]
    presets = listing.stdout.split("presets (configs/", 1)[1]
    assert "sac-Pendulum-v1.yaml" in presets and "ppo-CartPole-v1.yaml" in presets
    assert all((unpacked / "configs" / "sweeps" / os.path.basename(name)).is_file()
               for name in tracked if name.startswith("configs/sweeps/"))
