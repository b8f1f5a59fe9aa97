"""core/learning/replay_buffer.py: ring storage, uniform and prioritized sampling, checked by hand.

Blocks are built so that a transition's content says which one it is: transition number k
(counting from 0 in the order added) has observation [k, -k], reward k, and so on, so a slot's
content tells which transition is there.
"""
import numpy as np
import pytest

from core.learning.replay_buffer import (MinTree, PrioritizedReplayBuffer, ReplayBuffer, SumTree,
                                Transitions)

pytestmark = pytest.mark.unit


def block(first, n, obs_dim=2, act_dim=1):
    """Transitions number first .. first + n - 1."""
    k = np.arange(first, first + n, dtype=np.float32)
    return Transitions(
        observations=np.stack([k * (1 if j % 2 == 0 else -1) for j in range(obs_dim)], axis=1),
        actions=np.repeat(k[:, None] * 10, act_dim, axis=1),
        rewards=k.copy(),
        next_observations=np.stack([k + 0.5] * obs_dim, axis=1),
        terminated=(k % 3 == 0).astype(np.float32))


def stored_ids(buffer):
    """The transition number held in each stored slot, read back from the rewards column."""
    return buffer.state_dict()["rewards"].astype(int).tolist()


# -- ring storage ---------------------------------------------------------------------------

def test_blocks_fill_in_order_and_wrap_around():
    buffer = ReplayBuffer(5, (2,), (1,))
    assert len(buffer) == 0 and buffer.capacity == 5
    assert buffer.add(block(0, 3)) == 3
    assert stored_ids(buffer) == [0, 1, 2] and len(buffer) == 3
    # 3 more than the 2 slots left before the end: slots 3, 4, then 0 (5 overwrites 0)
    assert buffer.add(block(3, 3)) == 3
    assert stored_ids(buffer) == [5, 1, 2, 3, 4]
    assert len(buffer) == 5 and buffer.total_added == 6
    # 6, more than the whole ring: slots 1, 2, 3, 4, 0, 1 -> 6 is dropped, 11 lands in slot 1
    assert buffer.add(block(6, 6)) == 5
    assert stored_ids(buffer) == [10, 11, 7, 8, 9]
    assert len(buffer) == 5 and buffer.total_added == 12
    state = buffer.state_dict()
    np.testing.assert_array_equal(state["observations"][1], [11, -11])
    np.testing.assert_array_equal(state["actions"][1], [110])
    np.testing.assert_array_equal(state["next_observations"][1], [11.5, 11.5])
    np.testing.assert_array_equal(state["terminated"], [0, 0, 0, 0, 1])   # 10 11 7 8 9


def test_a_block_longer_than_capacity_keeps_the_newest():
    buffer = ReplayBuffer(4, (2,), (1,))
    buffer.add(block(0, 1))                       # slot 0
    assert buffer.add(block(1, 10)) == 4          # transitions 1..10 -> slots 1,2,3,0,1,2,3,0,1,2
    # the newest four, 7..10, sit where one-at-a-time adds would have put them
    assert stored_ids(buffer) == [8, 9, 10, 7]
    assert buffer.total_added == 11 and len(buffer) == 4
    buffer.add(block(11, 1))                      # then the ring continues at slot 3
    assert stored_ids(buffer) == [8, 9, 10, 11]


def test_generations_count_writes_per_slot():
    buffer = ReplayBuffer(3, (2,), (1,))
    buffer.add(block(0, 4))                       # slot 0 twice, slots 1 and 2 once
    np.testing.assert_array_equal(buffer.generations([0, 1, 2]), [2, 1, 1])
    buffer.add(block(4, 2))
    np.testing.assert_array_equal(buffer.generations([0, 1, 2]), [2, 2, 2])


def test_add_rejects_mismatched_shapes():
    buffer = ReplayBuffer(4, (2,), (1,))
    bad = block(0, 3)._replace(actions=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="actions"):
        buffer.add(bad)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1)


def test_uniform_sampling_returns_only_stored_rows_consistently():
    buffer = ReplayBuffer(100, (2,), (1,), seed=3)
    buffer.add(block(0, 7))
    batch = buffer.sample(1000)
    assert batch.indices.dtype == np.int64 and batch.generations.dtype == np.int64
    assert set(batch.indices.tolist()) == set(range(7))     # all 7 drawn, nothing else
    k = batch.transitions.rewards
    np.testing.assert_array_equal(k, batch.indices)          # slot i holds transition i
    np.testing.assert_array_equal(batch.transitions.observations[:, 1], -k)
    np.testing.assert_array_equal(batch.transitions.next_observations[:, 0], k + 0.5)
    np.testing.assert_array_equal(batch.weights, np.ones(1000, np.float32))
    np.testing.assert_array_equal(batch.generations, np.ones(1000))
    assert batch.weights.dtype == np.float32


def test_same_seed_same_batches():
    a, b = (ReplayBuffer(50, (2,), (1,), seed=7) for _ in range(2))
    for buffer in (a, b):
        buffer.add(block(0, 50))
    np.testing.assert_array_equal(a.sample(32).indices, b.sample(32).indices)


def test_dtypes_are_kept():
    buffer = ReplayBuffer(4, (3, 3), (), observation_dtype=np.uint8, action_dtype=np.int64)
    obs = np.arange(18, dtype=np.uint8).reshape(2, 3, 3)
    buffer.add(Transitions(obs, np.array([1, 2]), np.array([1.0, 2.0], np.float32), obs,
                           np.zeros(2, np.float32)))
    batch = buffer.sample(4)
    assert batch.transitions.observations.dtype == np.uint8
    assert batch.transitions.actions.dtype == np.int64
    assert batch.transitions.observations.shape == (4, 3, 3)
    # columns of 4 slots: obs 9 B and next 9 B, action 8 B, reward and terminated 4 B each
    assert buffer.nbytes() == 4 * (9 + 9 + 8 + 4 + 4)


def test_state_dict_round_trip():
    buffer = PrioritizedReplayBuffer(6, (2,), (1,), alpha=1.0)
    buffer.add(block(0, 8), priorities=np.arange(8))
    buffer.sample(4)
    restored = PrioritizedReplayBuffer(6, (2,), (1,), alpha=1.0)
    restored.load_state_dict(buffer.state_dict())
    assert stored_ids(restored) == stored_ids(buffer) == [6, 7, 2, 3, 4, 5]
    assert restored.total_added == 8 and restored.sample_calls == 1
    assert restored.max_priority == buffer.max_priority
    np.testing.assert_array_equal(restored.sum_tree.tree, buffer.sum_tree.tree)
    np.testing.assert_array_equal(restored.min_tree.tree, buffer.min_tree.tree)


def test_a_million_lunar_lander_transitions_fit_in_200_mb():
    # obs 8 and next obs 8 float32 (64 B), action 2 float32 (8 B), reward, terminated (8 B):
    # 80 B a transition, 80 MB for a million; the prioritized buffer adds two float64 trees
    # of 2 * 2^20 nodes (32 MiB). np.zeros maps the pages lazily: nothing is touched here.
    uniform = ReplayBuffer(1_000_000, (8,), (2,))
    assert uniform.nbytes() == 80_000_000
    prioritized = PrioritizedReplayBuffer(1_000_000, (8,), (2,))
    assert prioritized.nbytes() == 80_000_000 + 2 * 2 * 2**20 * 8
    assert prioritized.nbytes() < 200 * 2**20


# -- SumTree --------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 2, 5, 100, 1000, 1023, 1025])
def test_sum_tree_matches_a_cumulative_sum_search(size):
    rng = np.random.default_rng(size)
    tree = SumTree(size)
    assert tree.capacity >= size and tree.capacity & (tree.capacity - 1) == 0
    values = rng.random(size) * (rng.random(size) < 0.8)     # some zero leaves
    values[-1] = 0.7                                          # keep the total positive
    tree.update(np.arange(size), values)
    assert tree.total() == pytest.approx(values.sum(), rel=1e-12)
    # brute force: the first i with cumsum[i] > u, skipping zero leaves by construction
    cumsum = np.cumsum(values)
    u = rng.random(5000) * values.sum()
    expected = np.searchsorted(cumsum, u, side="right")
    # a u within rounding of a boundary can go either way; none land there at this size
    near = np.abs(cumsum[np.minimum(expected, size - 1)] - u) < 1e-9
    np.testing.assert_array_equal(tree.find(u)[~near], expected[~near])
    # a second update of random leaves, with repeats: the last write wins
    idx = rng.integers(0, size, 300)
    new = rng.random(300)
    tree.update(idx, new)
    for i, v in zip(idx, new):
        values[i] = v
    np.testing.assert_allclose(tree[np.arange(size)], values)
    assert tree.total() == pytest.approx(values.sum(), rel=1e-12)
    u = rng.random(5000) * values.sum()
    cumsum = np.cumsum(values)
    expected = np.searchsorted(cumsum, u, side="right")
    near = np.abs(cumsum[np.minimum(expected, size - 1)] - u) < 1e-9
    np.testing.assert_array_equal(tree.find(u)[~near], expected[~near])


def test_sum_tree_by_hand_and_edges():
    tree = SumTree(3)                        # rounded up to 4 leaves
    tree.update([0, 1, 2], [1.0, 0.0, 3.0])  # cumulative 1, 1, 4
    assert tree.total() == 4.0
    np.testing.assert_array_equal(tree.find([0.0, 0.999, 1.0, 3.999]), [0, 0, 2, 2])
    # at or past the total (float rounding), the last nonzero leaf, never the empty leaf 3
    np.testing.assert_array_equal(tree.find([4.0, 5.0]), [2, 2])
    tree.update([2, 2, 0], [9.0, 2.0, 5.0])  # repeats: the last write wins
    assert tree.total() == 7.0


def test_min_tree():
    tree = MinTree(5)
    assert tree.min() == np.inf
    tree.update([0, 3, 4], [3.0, 2.0, 5.0])
    assert tree.min() == 2.0
    tree.update([3], [4.0])
    assert tree.min() == 3.0


# -- prioritized buffer ---------------------------------------------------------------------

def test_sampling_frequencies_follow_priorities():
    # priorities 1, 2, 3, 4 (alpha 1): P = .1, .2, .3, .4. Binomial sd over 200k draws is at
    # most 0.0011; stratified draws are tighter still. 0.01 is a wide margin.
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=1.0, epsilon=0.0, seed=0)
    buffer.add(block(0, 4), priorities=[1, 2, 3, 4])
    counts = np.zeros(4)
    for _ in range(200):
        counts += np.bincount(buffer.sample(1000).indices, minlength=4)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)


def test_single_draws_follow_priorities():
    # batch_size 1 is one segment: plain proportional draws, no stratification to help.
    # 50k draws: binomial sd at most sqrt(.4 * .6 / 50000) = 0.0022, so 0.01 is 4.5 sd.
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=1.0, epsilon=0.0, seed=0)
    buffer.add(block(0, 4), priorities=[1, 2, 3, 4])
    counts = np.bincount(np.concatenate([buffer.sample(1).indices for _ in range(50_000)]),
                         minlength=4)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)


def test_frequencies_follow_priorities_to_the_alpha():
    # alpha 0.5: p^alpha = 1, 2, 3 for priorities 1, 4, 9 -> P = 1/6, 2/6, 3/6
    buffer = PrioritizedReplayBuffer(3, (2,), (1,), alpha=0.5, epsilon=0.0, seed=1)
    buffer.add(block(0, 3), priorities=[1, 4, 9])
    counts = np.bincount(np.concatenate([buffer.sample(999).indices for _ in range(100)]),
                         minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), [1 / 6, 2 / 6, 3 / 6], atol=0.01)


def test_alpha_zero_is_uniform():
    buffer = PrioritizedReplayBuffer(8, (2,), (1,), alpha=0.0, seed=2)
    buffer.add(block(0, 5), priorities=[0.01, 1, 5, 100, 1e4])   # 3 slots left empty
    counts = np.bincount(np.concatenate([buffer.sample(500).indices for _ in range(200)]),
                         minlength=8)
    np.testing.assert_array_equal(counts[5:], 0)
    np.testing.assert_allclose(counts[:5] / counts.sum(), 0.2, atol=0.01)
    np.testing.assert_allclose(buffer.sample(10).weights, 1.0)


def test_importance_weights_by_hand():
    # alpha 1, epsilon 0, priorities 1, 1, 2, 4 over N = 4: P = 1/8, 1/8, 2/8, 4/8.
    # beta = 0.5 (beta0; first call): w_i = (N P_i)^-0.5 = (.5)^-.5, (.5)^-.5, 1^-.5, 2^-.5
    #   = 1.41421, 1.41421, 1, 0.70711; max_j w_j = 1.41421 (the lowest priority)
    #   -> normalized 1, 1, 0.70711, 0.5
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=1.0, beta0=0.5, beta_steps=2,
                                     epsilon=0.0, seed=0)
    buffer.add(block(0, 4), priorities=[1, 1, 2, 4])
    expected = {0: 1.0, 1: 1.0, 2: 0.5 ** 0.5, 3: 0.5}
    batch = buffer.sample(64)
    assert buffer.beta == 0.75                    # halfway after one of two calls
    np.testing.assert_allclose(batch.weights, [expected[i] for i in batch.indices], rtol=1e-6)
    # beta 0.75 on the second call: (N P_i / N P_min)^-.75 = 1, 1, 2^-.75, 4^-.75
    batch = buffer.sample(64)
    expected = {0: 1.0, 1: 1.0, 2: 2 ** -0.75, 3: 4 ** -0.75}
    np.testing.assert_allclose(batch.weights, [expected[i] for i in batch.indices], rtol=1e-6)
    # beta reaches 1 and stays there: w = P_min / P_i = 1, 1, 1/2, 1/4
    assert buffer.beta == 1.0
    for _ in range(3):
        batch = buffer.sample(64)
        expected = {0: 1.0, 1: 1.0, 2: 0.5, 3: 0.25}
        np.testing.assert_allclose(batch.weights, [expected[i] for i in batch.indices], rtol=1e-6)
    assert buffer.beta == 1.0


def test_beta_anneals_linearly():
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), beta0=0.4, beta_steps=10)
    buffer.add(block(0, 4))
    betas = []
    for _ in range(12):
        betas.append(buffer.beta)
        buffer.sample(2)
    np.testing.assert_allclose(betas, [0.4 + 0.06 * min(i, 10) for i in range(12)])


def test_new_data_gets_the_max_priority():
    buffer = PrioritizedReplayBuffer(8, (2,), (1,), alpha=1.0, epsilon=0.0)
    buffer.add(block(0, 2))                        # nothing seen yet: priority 1
    np.testing.assert_array_equal(buffer.sum_tree[[0, 1]], [1, 1])
    buffer.add(block(2, 2), priorities=[3.0, -5.0])  # explorer |TD|s, sign dropped
    np.testing.assert_array_equal(buffer.sum_tree[[2, 3]], [3, 5])
    buffer.update_priorities([0], [1], [7.0])      # slot 0, written once: generation 1
    assert buffer.max_priority == 7.0
    buffer.add(block(4, 2))
    np.testing.assert_array_equal(buffer.sum_tree[[4, 5]], [7, 7])
    with pytest.raises(ValueError):                # wrong count: rejected, nothing stored
        buffer.add(block(6, 2), priorities=[1.0, 2.0, 3.0])
    assert buffer.total_added == 6
    buffer.update_priorities([0], [1], [0.5])      # lowering one does not lower the max
    buffer.add(block(6, 1))
    assert buffer.sum_tree[[6]][0] == 7.0


def test_update_priorities_sets_p_plus_epsilon_to_the_alpha():
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=0.5, epsilon=0.25)
    buffer.add(block(0, 4), priorities=[0.0, 0.0, 0.0, 0.0])
    batch = buffer.sample(4)
    applied = buffer.update_priorities(batch.indices, batch.generations,
                                       np.arange(4, dtype=np.float32) + 3.75)
    assert applied == 4
    # leaf = (|td| + 0.25)^0.5; slots drawn more than once keep the last update
    last = {i: td for i, td in zip(batch.indices, np.arange(4) + 3.75)}
    for i, td in last.items():
        assert buffer.sum_tree[[i]][0] == pytest.approx((td + 0.25) ** 0.5)


def test_stale_priority_updates_are_ignored():
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=1.0, epsilon=0.0, seed=0)
    buffer.add(block(0, 4), priorities=[1, 1, 1, 1])
    batch = buffer.sample(4)
    # new data overwrites slots 0 and 1 while the learner trains on the batch
    buffer.add(block(4, 2), priorities=[2, 2])
    np.testing.assert_array_equal(buffer.generations([0, 1, 2, 3]), [2, 2, 1, 1])
    stale = np.isin(batch.indices, [0, 1])
    applied = buffer.update_priorities(batch.indices, batch.generations,
                                       np.full(4, 9.0))
    assert applied == int((~stale).sum())
    leaves = buffer.sum_tree[np.arange(4)]
    np.testing.assert_array_equal(leaves[:2], [2, 2])       # the newcomers keep their own
    for i in set(batch.indices[~stale].tolist()):
        assert leaves[i] == 9.0
    # a direct case: slot 0 sampled at generation 2, overwritten (generation 3), then updated
    assert buffer.update_priorities([0], [2], [5.0]) == 1
    assert buffer.sum_tree[[0]][0] == 5.0
    buffer.add(block(6, 3), priorities=[1, 1, 1])          # slots 2, 3, 0
    assert buffer.update_priorities([0], [2], [100.0]) == 0
    assert buffer.sum_tree[[0]][0] == 1.0
    assert buffer.max_priority == 9.0
    with pytest.raises(ValueError, match="slots"):
        buffer.update_priorities([4], [1], [1.0])          # past the end: not a slot


def test_prioritized_ring_keeps_the_newest_priorities():
    buffer = PrioritizedReplayBuffer(4, (2,), (1,), alpha=1.0, epsilon=0.0)
    buffer.add(block(0, 1), priorities=[1])
    buffer.add(block(1, 10), priorities=np.arange(1, 11) * 10)  # transitions 1..10
    assert stored_ids(buffer) == [8, 9, 10, 7]
    # transition k got priority 10k
    np.testing.assert_array_equal(buffer.sum_tree[np.arange(4)], [80, 90, 100, 70])
    assert buffer.sum_tree.total() == 340
    assert buffer.min_tree.min() == 70


@pytest.mark.parametrize("capacity", [1, 5, 64, 1000])
def test_block_adds_keep_every_tree_node_the_sum_and_min_of_its_children(capacity):
    """Blocks of assorted sizes, wrapping around the ring, longer than it, with and without
    priorities: afterwards every inner node of both trees combines its two children, and the
    leaves are the priorities of the transitions stored in their slots."""
    rng = np.random.default_rng(capacity)
    buffer = PrioritizedReplayBuffer(capacity, (2,), (1,), alpha=0.7, epsilon=0.0)
    expected = np.zeros(capacity)
    total = 0
    for size in [3, 1, 7, 64, 2 * capacity + 1, 5, 255, 1]:
        given = rng.random() < 0.7
        priorities = rng.uniform(0.1, 5.0, size) if given else None
        buffer.add(block(total, size), priorities=priorities)
        p = priorities if given else np.full(size, buffer.max_priority)
        for k in range(max(0, size - capacity), size):
            expected[(total + k) % capacity] = p[k] ** 0.7
        total += size
    for tree, combine in ((buffer.sum_tree, np.add), (buffer.min_tree, np.minimum)):
        inner = np.arange(1, tree.capacity)
        np.testing.assert_allclose(tree.tree[inner],
                                   combine(tree.tree[2 * inner], tree.tree[2 * inner + 1]))
        np.testing.assert_allclose(tree[np.arange(capacity)], expected)
