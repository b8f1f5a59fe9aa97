"""A replay buffer that mixes a fixed dataset into every batch (--dataset with --offline_ratio
below 1: offline-to-online fine-tuning).

The online experience goes into the ring as in any ReplayBuffer; the dataset sits beside it in
a buffer of its own size, never overwritten. Every batch takes round(ratio * B) rows from the
dataset and the rest from the online ring (RLPD's symmetric sampling at ratio 0.5, Ball et al.
2023; the offline-to-online IQL and CQL recipes of CORL keep the dataset in the buffer too),
all of them from the dataset while the ring is still empty. Uniform inside each part; the rows
of one batch are the dataset's first, then the ring's.
"""
import numpy as np

from core import seeding, spaces
from core.learning.replay_buffer import ReplayBatch, ReplayBuffer, Transitions


class MixedReplayBuffer(ReplayBuffer):
    """The online ring (this buffer) plus ``dataset``, a Transitions block kept whole."""

    def __init__(self, capacity, observation_shape, action_shape, dataset, ratio,
                 observation_dtype=np.float32, action_dtype=np.float32, seed=0,
                 with_discounts=False, reward_scale=1.0):
        super().__init__(capacity, observation_shape, action_shape, observation_dtype,
                         action_dtype, seed, with_discounts, reward_scale)
        rows = len(dataset.rewards)
        self.dataset = ReplayBuffer(rows, observation_shape, action_shape, observation_dtype,
                                    action_dtype, seeding.dataset_sampling(seed), with_discounts,
                                    reward_scale)
        self.dataset.add(dataset)
        self.ratio = float(ratio)

    def dataset_rows(self, batch_size) -> int:
        """How many of a batch of ``batch_size`` come from the dataset now."""
        if super().__len__() == 0:
            return batch_size
        return int(round(self.ratio * batch_size))

    def sample(self, batch_size) -> ReplayBatch:
        offline = self.dataset_rows(batch_size)
        parts = []
        if offline:
            parts.append(self.dataset.sample(offline))
        if batch_size - offline:
            parts.append(super().sample(batch_size - offline))
        if len(parts) == 1:
            return parts[0]
        columns = [None if parts[0].transitions[i] is None else
                   spaces.concatenate([p.transitions[i] for p in parts])
                   for i in range(len(Transitions._fields))]
        # (indices and generations of the two parts name slots of different buffers: only
        # prioritized replay reads them, and it is not offered here)
        return ReplayBatch(Transitions(*columns),
                           *(np.concatenate([getattr(p, name) for p in parts])
                             for name in ("indices", "generations", "weights")))

    def state_dict(self) -> dict:
        """The ring's rows and both samplers (the dataset's rows are read again from its
        file)."""
        return {**super().state_dict(), "dataset_sampler": self.dataset.sampling_state()}

    def load_state_dict(self, state: dict):
        super().load_state_dict(state)
        if state.get("dataset_sampler") is not None:
            self.dataset.load_sampling_state(state["dataset_sampler"])
