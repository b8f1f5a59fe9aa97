"""Importing the built-in models changes nothing process-wide in torch: a user's own code (or a
test) that builds torch.distributions objects keeps torch's argument validation. The models
turn it off only for the distributions they build themselves, where it costs more than the
forward pass."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from models.ppo import PPOModel
from options.options import parse_args

pytestmark = pytest.mark.contract

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A fresh interpreter: in this one, some test has imported the models already.
CHECK = """
import torch
from torch.distributions import Distribution
for setting in (True, False):
    Distribution.set_default_validate_args(setting)
    if setting:
        import models  # every module in models/ (models/__init__.py imports them all)
        import models.ppo
        import models.sac
        import models.crossq
        import models.custom_model
    assert Distribution._validate_args is setting, (setting, Distribution._validate_args)
    try:
        torch.distributions.Normal(torch.zeros(1), -torch.ones(1))
    except ValueError:
        assert setting, "validated although switched off"
    else:
        assert not setting, "a negative scale passed: validation was switched off"
print("ok")
"""


def test_importing_the_models_leaves_torch_argument_validation_alone():
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_ppo_builds_its_own_distributions_without_validation():
    observation_space = spaces.Box(-1, 1, (4,), dtype=np.float32)
    for action_space, flags in ((spaces.Discrete(3), ()), (spaces.Box(-1, 1, (2,)), ()),
                                (spaces.Box(-1, 1, (2,)), ("--use_sde",))):
        args = parse_args(["--config", "none", "--num_workers", "0", *flags])
        model = PPOModel(args, observation_space, action_space)
        policy = model.distribution(model.features(torch.zeros((2, 4))))
        assert policy._validate_args is False, flags
