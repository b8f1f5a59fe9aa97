"""Learning: where experience becomes weights.

The learner (learner.py: averages gradients, applies them, versions the weights), SAC's
parameter server and learner workers (parameter_server.py), data-parallel learners averaging
over gloo (allreduce.py), replay buffers, uniform and prioritized (replay_buffer.py), and the
observation normalizer merged across workers (normalizer.py).
"""
