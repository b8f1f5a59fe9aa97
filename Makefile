# make run  : create .venv, install pinned requirements, train the default (PPO on CartPole-v1)
# make test : same set-up, then the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
ARGS ?=

.PHONY: setup run test clean

setup: $(STAMP)

# Re-install only when requirements.txt changes; the stamp makes `setup` idempotent.
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -c "import torch, ray, ray.tune, optuna, gymnasium, Box2D, ale_py, cv2, mujoco; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

run: setup
	$(PY) main.py $(ARGS)

test: setup
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) runs .pytest_cache
