"""Per-process set-up shared by the driver and every actor."""
import os

import torch


def setup_process(args):
    """One torch thread per process unless --torch_threads says otherwise: on 2 cores, two
    threads per process made Stable-Baselines3 6.5x slower (shared/design.md)."""
    threads = int(getattr(args, "torch_threads", 1) or 1)
    torch.set_num_threads(threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
