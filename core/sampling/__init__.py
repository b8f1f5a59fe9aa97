"""Sampling: where experience comes from.

Rollout workers (rollout.py) step groups of envs (envs.py; or envs in actors of their own,
env_host.py) with the newest weights and hand fragments to their agent; sample_ahead.py decides
whether they sample the next fragment while the learner works; worker_group.py spawns,
health-checks and replaces any kind of worker. The test worker (evaluator.py) and its schedule
(eval_runner.py) evaluate the weights; playback.py is --evaluate and --record_video.
"""
