"""The set-up files agree: requirements.txt and ray.yml pin the same packages; make targets."""
import os
import re

import yaml

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
    assert {"setup", "run", "test"} <= targets


def test_ci_runs_make_test():
    path = os.path.join(REPO_ROOT, ".ci", "run")
    assert os.access(path, os.X_OK)
    commands = [line.strip() for line in read(".ci/run").splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert "make test" in commands
