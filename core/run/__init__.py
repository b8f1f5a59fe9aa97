"""A run's lifetime: from start to the summary.

session.py starts a run (plugins, Ray, run directory, trainer), restores it, checkpoints it on
schedule and on signals, and writes its summary; context.py holds its clock, counters and stop
rules; checkpoint.py and state.py write and read checkpoints as data (never code); metrics.py
and plots.py write metrics.csv, TensorBoard events and the learning curves.
"""
