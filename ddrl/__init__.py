"""ddrl from Python (run from the repository's root, or with it on sys.path):

    import ddrl
    run = ddrl.train(gym_id="CartPole-v1", num_workers=0, total_steps=50_000)
    policy = ddrl.load(run.run_dir)                # or any run directory / checkpoint file
    action = policy.act(obs)

``train`` is core/app/api.py, ``load`` and ``Policy`` core/app/policy.py; ``ConfigError`` is
what bad input raises (the paragraph ``python main.py`` prints).
"""
from core.app.api import Run, train
from core.app.policy import Policy, load
from core.errors import ConfigError

__all__ = ["ConfigError", "Policy", "Run", "load", "train"]
