"""A learner process's own rows of --dataset (--shard_dataset): data parallelism without a
replay buffer in the middle.

Without it the offline loop keeps the whole dataset in one replay buffer actor, and every
batch crosses Ray from there to whichever process computes the update. With --shard_dataset
and --num_learners N each process that computes a share of the update (the learner workers
with --learner_sync server; the parameter server and its N - 1 replicas with allreduce) reads
its shard of the dataset (core/data load_dataset's ``shard``: the rows at index i modulo N,
so every episode, early or late, good or bad, is spread over all shards alike) into a replay
buffer of its own and draws its share of each batch there. No batch travels; each process
holds 1/N of the rows, and a Minari dataset is read episode by episode (an HDF5 file of
arrays a block of rows at a time), so none ever holds the whole.

The batch is then stratified rather than uniform: each shard gives its fixed share (equal
shares of shards of equal size, within a row), which has the same expectation as one uniform
draw from the whole and never a smaller spread of rows.

Two rounds from the driver (core/algos/offline_trainer.py): ``hold_shard`` reads the rows and
answers what the driver merges (their count, the observations' moments, the episodes'
returns: every shard sees every episode); ``fill_shard`` then normalizes them with the whole
dataset's statistics, scales the rewards and fills the buffer. A replacement learner (its
process died) reads and fills its shard again from the statistics the driver kept.
"""
import numpy as np

from core import seeding
from core.learning.normalizer import moments_of, normalize
from core.learning.replay_buffer import ReplayBuffer

#: rows normalized and stored at a time by ``fill_shard``
FILL_BLOCK_ROWS = 65536


def with_discount(transitions, discount):
    """``transitions`` with a discounts column of ``discount`` (None: as they are)."""
    if discount is None:
        return transitions
    return transitions._replace(discounts=np.full(len(transitions.rewards), discount,
                                                  np.float32))


def normalized_rows(transitions, statistics, clip):
    """``transitions`` with both observation columns normalized with a dataset's frozen
    ``statistics`` (None: as they are)."""
    if statistics is None:
        return transitions
    return transitions._replace(
        observations=normalize(transitions.observations, statistics, clip),
        next_observations=normalize(transitions.next_observations, statistics, clip))


class DatasetShardHolder:
    """Mixed into the processes that compute updates (core/learning/parameter_server.py's
    ParameterServer and LearnerWorker): ``hold_shard``, ``fill_shard``, draws from the shard,
    and its sampler's state for checkpoints."""
    shard = None       # the ReplayBuffer of this process's rows, once filled
    shard_rows = None  # the rows read by hold_shard, until fill_shard stores them

    def hold_shard(self, source, spaces, index, count, discount=None, normalized=False):
        """Read shard ``index`` of ``count`` of the dataset ``source`` (checked against the
        run's ``spaces``); ``discount``: the discounts column's value for an agent whose
        transitions carry one. Returns what the driver merges: {"rows", "moments" (of the
        raw observations, with ``normalized``), "overview" (core/data DatasetOverview of the
        whole dataset, but for its rows)}."""
        from core.data import load_dataset
        data = load_dataset(source, *spaces, shard=(index, count))
        self.shard_rows = with_discount(data.transitions, discount)
        self.shard_index, self.shard_spaces = int(index), spaces
        return {"rows": len(data),
                "moments": moments_of(data.transitions.observations) if normalized else None,
                "overview": data.overview()}

    def fill_shard(self, columns, statistics=None, obs_clip=10.0, reward_scale=1.0, seed=0):
        """Store the rows read: ``columns`` (shapes, dtypes, action dtype: the replay loop's
        buffer_columns), normalized with the whole dataset's ``statistics`` (None: as read),
        rewards times ``reward_scale``; the sampler seeded for this shard. Returns the rows."""
        read = self.shard_rows
        shapes, dtypes, action_dtype = columns
        count = len(read.rewards)
        self.shard = ReplayBuffer(count, shapes, self.shard_spaces[1].shape,
                                  observation_dtype=dtypes, action_dtype=action_dtype,
                                  seed=seeding.dataset_shard(seed, self.shard_index),
                                  with_discounts=read.discounts is not None,
                                  reward_scale=reward_scale)
        # normalized a block at a time: the rows read and the buffer are the only whole
        # copies (normalizing them all at once held a third while the buffer filled)
        for start in range(0, count, FILL_BLOCK_ROWS):
            block = read.rows(start, start + FILL_BLOCK_ROWS)
            self.shard.add(normalized_rows(block, statistics, obs_clip))
        self.shard_rows = None
        return count

    def shard_batches(self, rows, count):
        """``count`` batches of ``rows`` rows each from this process's shard."""
        return self.shard.sample_batches(rows, count)

    def shard_sampling_state(self):
        return self.shard.sampling_state()

    def load_shard_sampling_state(self, state):
        self.shard.load_sampling_state(state)


def merged_overview(answers):
    """The whole dataset as the shards' ``hold_shard`` answers describe it: the overview
    with every shard's rows counted, and the shards' observation moments, a list for the
    driver's normalizer to merge (None when not asked for)."""
    from dataclasses import replace
    overview = replace(answers[0]["overview"], rows=sum(a["rows"] for a in answers))
    moments = [a["moments"] for a in answers]
    return overview, (None if moments[0] is None else moments)


def shard_sizes_note(answers):
    """The shards' sizes, as the start line says them."""
    sizes = [a["rows"] for a in answers]
    return (f"{len(sizes)} shards of {min(sizes):,}" + (f"-{max(sizes):,}" if max(sizes) != min(sizes)
                                                        else "") + " rows")

