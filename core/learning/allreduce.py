"""Data-parallel SAC learners that average their gradients among themselves (--learner_sync
allreduce), as DistributedDataParallel does, instead of sending them to the parameter server.

Each of the N learner processes (the parameter server is rank 0, N - 1 replicas of it the
others) holds the whole model and its optimizer, gets the same replay batches by object
reference, computes the gradients of its own rows of each batch, and one allreduce sums the
share-weighted gradients and losses of all ranks: every rank then holds the gradient of the whole
batch (the losses are means, so weighting each rank's by its rows' share makes the sum the
whole batch's mean) and applies the same optimizer step, so the replicas stay identical without
weights travelling. Per update that is one allreduce of the flat gradient (~0.8 MB for SAC's
256x256 nets) instead of, through the parameter server, a Ray call per learner with the weights
out and the gradients back.

The transport is torch.distributed's gloo backend. The ranks meet through a file (FileStore: no
listening rendezvous port) and gloo's connections between them use the loopback interface
only (GLOO_SOCKET_IFNAME), as every other ddrl socket: the learners of one group run on one
machine.
"""
import datetime
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist

#: how long a rank waits in the allreduce for the others before it fails (a dead replica then
#: ends the update with an error instead of a hang, and the trainer rebuilds the group)
GROUP_TIMEOUT_S = 60.0


def loopback_interface():
    """The loopback interface's name: lo on Linux, lo0 on macOS and the BSDs."""
    return "lo0" if sys.platform == "darwin" or "bsd" in sys.platform else "lo"


def rendezvous_file():
    """A fresh path the ranks of one group meet through (it must not exist yet: FileStore
    counts the ranks that opened it)."""
    handle, path = tempfile.mkstemp(prefix="ddrl-learners-", suffix=".store")
    os.close(handle)
    os.unlink(path)
    return path


def remove_rendezvous_file(path):
    """Remove a group's rendezvous file (one already gone is fine)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def rank_rows(shares, rank, batch_size):
    """(start, end) of ``rank``'s rows in a batch of ``batch_size``: the group's ``shares``
    (given for --batch_size) scaled to the batch, consecutive, covering it once."""
    total = sum(shares)
    bounds = np.round(np.cumsum([0] + list(shares)) * batch_size / total).astype(int)
    return int(bounds[rank]), int(bounds[rank + 1])


class AllreduceGroup:
    """This process's membership of one learner group: its rank, the group's row shares of a
    batch, and the allreduce of an update's gradients and scalar stats."""

    def __init__(self, path, rank, shares, timeout_s=GROUP_TIMEOUT_S):
        os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
        self.rank, self.shares = int(rank), [int(s) for s in shares]
        self.world_size = len(self.shares)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {rank} outside a group of {self.world_size}")
        if dist.is_initialized():  # a rebuilt group in a process that was in one before
            dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=self.rank,
                                world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))

    def own_rows(self, batch):
        """This rank's rows of a ReplayBatch, and their share of it (the allreduce's weight)."""
        size = len(batch.indices)
        start, end = rank_rows(self.shares, self.rank, size)
        return batch.rows(start, end), (end - start) / size

    def broadcast_model(self, model):
        """Rank 0's parameters and buffers to every rank (a replica starts, or restarts, as
        the server's copy)."""
        with torch.no_grad():
            for tensor in model.state_dict().values():
                dist.broadcast(tensor, src=0)

    def allreduce(self, model, stats, share):
        """Replace this rank's gradients (in the parameters' .grad) and scalar ``stats`` by the
        share-weighted sum over the group: the whole batch's. ``share``: this rank's rows /
        the batch's. One flat tensor, one collective call. The ranks must have gradients for
        the same parameters (they run the same step on the same version)."""
        params = [p for p in model.parameters() if p.grad is not None]
        keys = sorted(k for k, v in stats.items() if np.isscalar(v))
        scalars = torch.tensor([float(stats[k]) for k in keys], dtype=torch.float32)
        flat = torch.cat([p.grad.reshape(-1).float() for p in params] + [scalars.to(
            params[0].grad.device if params else "cpu")])
        flat.mul_(share)
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n
        for key, value in zip(keys, flat[offset:].tolist()):
            stats[key] = value

    def close(self):
        if dist.is_initialized():
            dist.destroy_process_group()
