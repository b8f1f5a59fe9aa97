"""A replay buffer whose columns live on the learner's device (--replay_device cuda; issue 50).

FastTD3's lesson for off-policy learning on a GPU: many parallel envs, large batches, and the
replay buffer on the GPU, so that a batch of thousands of transitions is drawn where it is
used instead of being gathered on the host and copied over for every update. ``TorchReplayBuffer``
is the uniform ring of ``ReplayBuffer`` (same columns, dtypes, block writes, ring order) with
torch tensors on ``device``: a block from the rollout workers is copied to the device once, a
batch is ``torch.randint`` indices and a gather on the device, and the parameter server's round
(core/learning/device_rounds.py) takes it as it is.

It lives in the process that samples it, the parameter server's: the replay loop builds it there
with ``--num_workers 0`` (many envs come from a batched simulator: ``--num_envs_per_worker``),
one learner, uniform replay and no HER (options checked by the loop, each with its reason). On a
machine without CUDA it holds its tensors on the CPU and says so (the same numbers as the numpy
buffer's columns; the draws come from torch's generator instead of numpy's).
"""
import numpy as np
import torch

from core import spaces
from core.learning.replay_buffer import ReplayBatch, ReplayBuffer, Transitions


def _torch_dtype(dtype):
    return torch.from_numpy(np.empty(0, dtype)).dtype


class TorchReplayBuffer(ReplayBuffer):
    """``ReplayBuffer`` with its columns as torch tensors on ``device``."""

    def __init__(self, capacity, observation_shape, action_shape,
                 observation_dtype=np.float32, action_dtype=np.float32, seed=0,
                 with_discounts=False, device="cpu"):
        super().__init__(1, observation_shape, action_shape, observation_dtype, action_dtype,
                         seed, with_discounts)  # the numpy columns' layout, one row each
        self._capacity = int(capacity)
        if self._capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.device = torch.device(device)

        def column(array):
            return torch.zeros((self._capacity, *array.shape[1:]),
                               dtype=_torch_dtype(array.dtype), device=self.device)

        self._columns = Transitions(*(None if c is None else spaces.tree_map(column, c)
                                      for c in self._columns))
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))

    def nbytes(self) -> int:
        return sum(leaf.numel() * leaf.element_size()
                   for column in self._stored(self._columns) for leaf in spaces.leaves(column))

    def _write(self, column, data, start):
        data = torch.as_tensor(np.ascontiguousarray(data)).to(self.device, column.dtype)
        first = min(len(data), self._capacity - start)
        column[start:start + first] = data[:first]
        column[:len(data) - first] = data[first:]

    def sample(self, batch_size) -> ReplayBatch:
        """Uniform over the stored slots, with replacement, drawn on the device."""
        self._check_not_empty()
        indices = torch.randint(0, len(self), (batch_size,), generator=self.generator,
                                device=self.device)
        weights = torch.ones(batch_size, dtype=torch.float32, device=self.device)
        transitions = Transitions(*(None if column is None else
                                    spaces.tree_map(lambda leaf: leaf[indices], column)
                                    for column in self._columns))
        # slots and generations matter to prioritized buffers only, which are on the host
        return ReplayBatch(transitions, indices, torch.zeros_like(indices), weights)

    def generations(self, indices):
        indices = torch.as_tensor(indices, device=self.device)
        laps, position = divmod(self._total_added, self._capacity)
        return laps + (indices < position).long()

    @staticmethod
    def _host_rows(column, size):
        return column[:size].cpu().numpy()

    def state_dict(self) -> dict:
        """ReplayBuffer's (numpy rows on the host: checkpoints load anywhere), with torch's
        generator state for the draws in place of numpy's."""
        state = super().state_dict()
        state.update(rng=None, torch_rng=self.generator.get_state().numpy())
        return state

    def load_state_dict(self, state: dict):
        super().load_state_dict(state)  # the rows, through _write; numpy's generator unused
        if state.get("torch_rng") is not None:
            self.generator.set_state(torch.as_tensor(np.asarray(state["torch_rng"]),
                                                     dtype=torch.uint8))
