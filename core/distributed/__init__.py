"""Distribution: where processes run.

placement.py spawns Ray actors (or in-process stand-ins for --num_workers 0), starts Ray in the
background and chooses nodes; loopback.py keeps Ray on 127.0.0.1 with token authentication;
devices.py decides what a GPU is used for. (ddrl/cluster.py, the command that starts and stops
loopback nodes, stays at core/'s top: `python -m ddrl.cluster`.)
"""
