"""Algorithms: the training loops that drive sampling and learning.

trainer.py is the Trainer base class (the contract the run calls, and what every loop shares);
trainers.py the trainer registry (a model names its loop; a --user_dir plugin can register
one); ppo_trainer.py gradient-collecting PPO; replay_trainer.py the Ape-X-shaped
off-policy loop (SAC, CrossQ, DQN: rollout workers -> replay -> learners -> parameter server).
"""
