"""Action heads (models/distributions.py): log-probabilities and entropies against values worked
out by hand, masks that are never crossed, and finite gradients through masked logits."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.errors import ConfigError
from models.distributions import BernoulliHead, CategoricalHead, action_head

LN2, LN3 = math.log(2), math.log(3)
P = [1 / 6, 2 / 6, 3 / 6]  # softmax of the logits [0, ln 2, ln 3]: exp gives 1, 2, 3


def entropy_of(probs):
    return -sum(p * math.log(p) for p in probs if p > 0)


def close(actual, expected):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.unit
def test_heads_per_space_and_their_shapes():
    discrete = action_head(spaces.Discrete(5))
    assert isinstance(discrete, CategoricalHead)
    assert (discrete.param_dim, discrete.action_shape, discrete.action_dtype) == (5, (), np.int64)
    multi = action_head(spaces.MultiDiscrete([3, 2, 4]))
    assert (multi.param_dim, multi.action_shape, multi.action_dtype) == (9, (3,), np.int64)
    bits = action_head(spaces.MultiBinary(4))
    assert isinstance(bits, BernoulliHead) and not bits.takes_mask
    assert (bits.param_dim, bits.action_shape, bits.action_dtype) == (4, (4,), np.int8)
    grid = action_head(spaces.MultiBinary([2, 3]))
    assert (grid.param_dim, grid.action_shape) == (6, (2, 3))
    assert discrete.state_dict() == {} and multi.state_dict() == {}  # nothing in checkpoints


@pytest.mark.unit
@pytest.mark.parametrize("space", [spaces.Box(-1, 1, (2,)), spaces.Text(5),
                                   spaces.Tuple([spaces.Discrete(2)])])
def test_other_action_spaces_are_a_config_error(space):
    with pytest.raises(ConfigError, match="Discrete, MultiDiscrete and MultiBinary"):
        action_head(space)


@pytest.mark.unit
def test_discrete_log_prob_and_entropy_by_hand():
    head = action_head(spaces.Discrete(3))
    params = torch.tensor([[0.0, LN2, LN3]] * 3)
    close(head.log_prob(params, torch.tensor([0, 1, 2])), [math.log(p) for p in P])
    close(head.entropy(params), [entropy_of(P)] * 3)
    actions, log_prob = head.sample(params, deterministic=True)
    assert actions.tolist() == [2, 2, 2] and actions.dtype == torch.int64
    close(log_prob, [math.log(0.5)] * 3)


@pytest.mark.unit
def test_discrete_draws_follow_the_probabilities():
    torch.manual_seed(0)
    head = action_head(spaces.Discrete(3))
    actions, log_prob = head.sample(torch.tensor([[0.0, LN2, LN3]] * 30_000))
    frequencies = np.bincount(actions.numpy(), minlength=3) / 30_000
    np.testing.assert_allclose(frequencies, P, atol=0.01)
    close(log_prob, np.log(np.asarray(P))[actions.numpy()])


@pytest.mark.unit
def test_multi_discrete_is_the_sum_of_its_components():
    head = action_head(spaces.MultiDiscrete([3, 2]))
    # component 0: p = [1/6, 2/6, 3/6]; component 1: logits [0, ln 3] -> p = [1/4, 3/4]
    params = torch.tensor([[0.0, LN2, LN3, 0.0, LN3]] * 2)
    actions = torch.tensor([[1, 0], [2, 1]])
    close(head.log_prob(params, actions),
          [math.log(2 / 6) + math.log(1 / 4), math.log(3 / 6) + math.log(3 / 4)])
    close(head.entropy(params), [entropy_of(P) + entropy_of([1 / 4, 3 / 4])] * 2)
    best, log_prob = head.sample(params, deterministic=True)
    assert best.tolist() == [[2, 1]] * 2
    close(log_prob, [math.log(3 / 6) + math.log(3 / 4)] * 2)


@pytest.mark.unit
def test_multi_discrete_of_shape_2x2_flattens_in_c_order():
    head = action_head(spaces.MultiDiscrete([[2, 3], [4, 2]]))
    assert head.param_dim == 11 and head.action_shape == (2, 2)
    torch.manual_seed(1)
    params = torch.randn(7, 11)
    actions, log_prob = head.sample(params)
    assert actions.shape == (7, 2, 2) and log_prob.shape == (7,)
    assert (actions < torch.tensor([[2, 3], [4, 2]])).all() and (actions >= 0).all()
    close(head.log_prob(params, actions), log_prob)
    assert head.entropy(params).shape == (7,)
    # each component on its own slice of the output, in C order: (0,0) (0,1) (1,0) (1,1)
    by_hand = sum(torch.log_softmax(params[:, lo:hi], -1).gather(
        -1, actions.reshape(7, 4)[:, k:k + 1]).squeeze(-1)
        for k, (lo, hi) in enumerate([(0, 2), (2, 5), (5, 9), (9, 11)]))
    close(log_prob, by_hand)


@pytest.mark.unit
def test_multi_binary_by_hand():
    head = action_head(spaces.MultiBinary(2))
    # bit 0: logit ln 3 -> p(1) = 3/4; bit 1: logit 0 -> p(1) = 1/2
    params = torch.tensor([[LN3, 0.0]] * 3)
    actions = torch.tensor([[1, 0], [0, 1], [0, 0]], dtype=torch.int8)
    close(head.log_prob(params, actions),
          [math.log(3 / 4) + math.log(1 / 2), math.log(1 / 4) + math.log(1 / 2),
           math.log(1 / 4) + math.log(1 / 2)])
    close(head.entropy(params), [entropy_of([3 / 4, 1 / 4]) + math.log(2)] * 3)
    best, log_prob = head.sample(torch.tensor([[LN3, -1.0]]), deterministic=True)
    assert best.tolist() == [[1, 0]] and best.dtype == torch.int8
    close(log_prob, [math.log(3 / 4) + math.log(1 - 1 / (1 + math.exp(1)))])
    torch.manual_seed(2)
    draws, _ = head.sample(torch.tensor([[LN3, 0.0]] * 20_000))
    np.testing.assert_allclose(draws.float().mean(0).numpy(), [3 / 4, 1 / 2], atol=0.015)
    with pytest.raises(ValueError, match="no action mask"):
        head.sample(params, mask=torch.ones(3, 2, dtype=torch.bool))


@pytest.mark.unit
def test_multi_binary_keeps_its_shape():
    head = action_head(spaces.MultiBinary([2, 3]))
    actions, log_prob = head.sample(torch.zeros(4, 6))
    assert actions.shape == (4, 2, 3) and log_prob.shape == (4,)
    close(log_prob, [6 * math.log(0.5)] * 4)
    close(head.log_prob(torch.zeros(4, 6), actions), log_prob)


@pytest.mark.unit
def test_a_masked_action_is_never_drawn_nor_chosen():
    torch.manual_seed(3)
    head = action_head(spaces.Discrete(4))
    # action 3 has by far the largest logit, and is masked; so is action 0
    params = torch.tensor([[5.0, 0.0, LN2, 20.0]]).expand(10_000, 4)
    mask = torch.tensor([[False, True, True, False]]).expand(10_000, 4)
    actions, log_prob = head.sample(params, mask)
    assert set(actions.unique().tolist()) == {1, 2}
    np.testing.assert_allclose((actions == 2).float().mean().item(), 2 / 3, atol=0.02)
    close(log_prob, np.log(np.where(actions.numpy() == 1, 1 / 3, 2 / 3)))
    best, _ = head.sample(params[:2], mask[:2], deterministic=True)
    assert best.tolist() == [2, 2]


@pytest.mark.unit
def test_masked_entropy_and_log_prob_are_over_the_valid_actions():
    head = action_head(spaces.Discrete(4))
    params = torch.tensor([[7.0, 0.0, LN2, LN3], [0.0, LN2, LN3, -3.0]])
    mask = torch.tensor([[False, True, True, True], [True, True, True, True]])
    # row 0 renormalized over actions 1..3 is P; row 1 unmasked is P and exp(-3) / (6 + e^-3)
    rest = [1 / (6 + math.exp(-3)), 2 / (6 + math.exp(-3)), 3 / (6 + math.exp(-3)),
            math.exp(-3) / (6 + math.exp(-3))]
    close(head.entropy(params, mask), [entropy_of(P), entropy_of(rest)])
    close(head.log_prob(params, torch.tensor([3, 2]), mask),
          [math.log(3 / 6), math.log(rest[2])])


@pytest.mark.unit
def test_multi_discrete_mask_is_per_component_in_nvec_order():
    torch.manual_seed(4)
    head = action_head(spaces.MultiDiscrete([3, 2]))
    params = torch.zeros(10_000, 5)
    #                     component 0: only 2     component 1: only 0
    mask = torch.tensor([[False, False, True, True, False]]).expand(10_000, 5)
    actions, log_prob = head.sample(params, mask)
    assert (actions == torch.tensor([2, 0])).all()
    close(log_prob, torch.zeros(10_000))  # one valid action per component: probability 1
    close(head.entropy(params, mask), torch.zeros(10_000))
    half = torch.tensor([[True, False, True, True, True]])  # 2 of 3, then 2 of 2
    close(head.entropy(torch.zeros(1, 5), half), [2 * math.log(2)])


@pytest.mark.unit
def test_gradients_through_masked_logits_are_finite():
    for space, mask in ((spaces.Discrete(4), [[True, False, True, False], [False] * 3 + [True]]),
                        (spaces.MultiDiscrete([3, 2]),
                         [[True, False, False, True, True], [False, True, True, False, True]])):
        head = action_head(space)
        params = torch.randn(2, head.param_dim, requires_grad=True)
        mask = torch.tensor(mask)
        actions, _ = head.sample(params.detach(), mask)
        loss = -(head.log_prob(params, actions, mask) + head.entropy(params, mask)).sum()
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(params.grad).all()
        assert (params.grad[~mask] == 0).all()  # a masked logit does not learn


@pytest.mark.unit
def test_uneven_multi_discrete_padding_is_never_drawn():
    torch.manual_seed(5)
    head = action_head(spaces.MultiDiscrete([2, 5]))
    # component 0 prefers its last action, 1; its padding columns (2..4) repeat that logit,
    # and would win 4 draws in 5 were they not masked
    params = torch.cat([torch.tensor([[0.0, 10.0]]).expand(5_000, 2), torch.zeros(5_000, 5)], 1)
    actions, _ = head.sample(params)
    assert (actions[:, 0] <= 1).all() and (actions[:, 1] < 5).all()
    assert (actions[:, 0] == 1).float().mean() > 0.99
    close(head.entropy(torch.zeros(1, 7)), [math.log(2) + math.log(5)])
