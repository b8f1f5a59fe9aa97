"""Algorithms: the training loops that drive sampling and learning.

trainer.py is the Trainer base class (the contract the run calls, and what every loop shares);
trainers.py the trainer registry (a model names its loop; a --user_dir plugin can register
one); ppo_trainer.py gradient-collecting PPO; sac_trainer.py the Ape-X-shaped SAC (and CrossQ).
"""
