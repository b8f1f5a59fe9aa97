"""The application layer: what a user runs, above the library (core/sampling, learning, algos,
distributed, run). session.py is one training run's lifetime; playback.py is --evaluate and
--record_video; sweep.py runs Ray Tune sweeps of whole runs (--tune); cluster.py is the
`python -m core.app.cluster` command that starts a loopback Ray cluster. Only this layer (and
main.py) may import options/, the command line; tests/test_layers.py checks every direction.
"""
