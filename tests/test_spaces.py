"""core/spaces.py, the representation of structured observations: leaves, their paths and
dtypes, encode/decode, the batch functions, masks, and the one-paragraph errors."""
import numpy as np
import pytest
from gymnasium import spaces as gym_spaces

from core import spaces
from core.learning.normalizer import ObsNormalizer, moments_of, normalize
from core.errors import ConfigError

pytestmark = pytest.mark.unit

NESTED = gym_spaces.Dict({
    "image": gym_spaces.Box(0, 255, (7, 7, 3), np.uint8),
    "direction": gym_spaces.Discrete(4, start=1),
    "goal": gym_spaces.Dict({"achieved": gym_spaces.Box(-1, 1, (3,), np.float64),
                             "desired": gym_spaces.Box(-1, 1, (3,), np.float32)}),
    "pair": gym_spaces.Tuple((gym_spaces.MultiDiscrete([3, 2], start=[0, 5]),
                              gym_spaces.MultiBinary(4))),
})


def test_leaves_have_paths_shapes_and_the_carried_dtypes():
    layout = spaces.layout_of(NESTED)
    assert layout.structured and not layout.has_mask
    assert {p: (leaf.shape, leaf.dtype.name) for p, leaf in layout.leaves.items()} == {
        "image": ((7, 7, 3), "uint8"), "direction": ((), "int64"),
        "goal/achieved": ((3,), "float64"), "goal/desired": ((3,), "float32"),
        "pair/0": ((2,), "int64"), "pair/1": ((4,), "int8")}
    shapes, dtypes = spaces.carried(NESTED)
    assert dtypes["goal/achieved"] == np.float32 and dtypes["image"] == np.uint8
    assert shapes["pair/1"] == (4,)
    assert spaces.carried(gym_spaces.Box(0, 255, (4, 84, 84), np.uint8)) == (
        (4, 84, 84), np.dtype(np.uint8))
    assert spaces.carried(gym_spaces.Box(0, 255, (4, 84, 84), np.uint8), normalized=True)[1] \
        == np.float32


def test_encode_shifts_starts_to_zero_and_decode_gives_back_the_gymnasium_value():
    NESTED.seed(3)
    sample = NESTED.sample()
    layout = spaces.layout_of(NESTED)
    tree = layout.encode(sample)
    assert tree["direction"] == sample["direction"] - 1           # Discrete(4, start=1)
    assert list(tree["pair/0"]) == [sample["pair"][0][0], sample["pair"][0][1] - 5]
    back = layout.decode(spaces.stack([tree, tree]))               # a batch of two
    assert np.array_equal(back["pair"][0][1], sample["pair"][0])
    assert back["direction"][0] == sample["direction"]
    assert np.array_equal(back["goal"]["achieved"][1], sample["goal"]["achieved"])
    # a single non-Box leaf is the one path "obs"; a Box stays an array
    assert list(spaces.layout_of(gym_spaces.Discrete(5)).leaves) == ["obs"]
    box = gym_spaces.Box(-1, 1, (2,))
    assert spaces.layout_of(box).encode(np.zeros(2)) is not None
    assert not spaces.layout_of(box).structured


def test_batch_functions_treat_arrays_and_trees_alike():
    tree = {"a": np.arange(6).reshape(3, 2), "b": np.arange(3)}
    buffer = spaces.allocate(spaces.take(tree, 0), (4, 3))
    assert buffer["a"].shape == (4, 3, 2) and buffer["b"].dtype == tree["b"].dtype
    spaces.assign(buffer, 1, tree)
    assert np.array_equal(spaces.take(buffer, (1, 2))["a"], [4, 5])
    flat = spaces.reshape_leading(buffer, 2, (12,))
    assert flat["a"].shape == (12, 2) and spaces.batch_size(flat) == 12
    assert spaces.concatenate([tree, tree])["b"].tolist() == [0, 1, 2, 0, 1, 2]
    assert spaces.nbytes(tree) == tree["a"].nbytes + tree["b"].nbytes
    assert spaces.stack([np.zeros(2), np.ones(2)]).shape == (2, 2)


@pytest.mark.parametrize("leaf, name", [
    (gym_spaces.Text(10), "Text"),
    (gym_spaces.Graph(gym_spaces.Box(-1, 1, (2,)), None), "Graph"),
    (gym_spaces.Sequence(gym_spaces.Discrete(3)), "Sequence"),
])
def test_a_leaf_that_cannot_be_batched_is_one_paragraph_naming_its_key(leaf, name):
    space = gym_spaces.Dict({"image": gym_spaces.Box(0, 255, (7, 7, 3), np.uint8),
                             "mission": leaf})
    with pytest.raises(ConfigError) as error:
        spaces.layout_of(space)
    message = str(error.value)
    assert f"the observation key 'mission' is a {name} space" in message
    assert "--drop_keys mission" in message and "\n" not in message


def test_masks_must_be_top_level_and_fit_the_action_space():
    mask_space = gym_spaces.Box(0, 1, (5,), np.int8)
    layout = spaces.layout_of(gym_spaces.Dict({"x": gym_spaces.Box(-1, 1, (2,)),
                                               "action_mask": mask_space}))
    assert layout.has_mask and [leaf.path for leaf in layout.feature_leaves()] == ["x"]
    spaces.check_action_mask(layout, gym_spaces.MultiDiscrete([3, 2]))
    with pytest.raises(ConfigError, match="has 5 entries.*needs 4"):
        spaces.check_action_mask(layout, gym_spaces.Discrete(4))
    with pytest.raises(ConfigError, match="takes no mask"):
        spaces.check_action_mask(layout, gym_spaces.Box(-1, 1, (2,)))
    with pytest.raises(ConfigError, match="top-level Dict key"):
        spaces.layout_of(gym_spaces.Dict({"inner": gym_spaces.Dict({"action_mask": mask_space})}))


def test_rows_without_a_valid_action_count_each_sub_action():
    batch = {"action_mask": np.array([[1, 0, 0, 1, 0],     # fine
                                      [0, 0, 0, 1, 1],     # sub-action 0 has no choice
                                      [1, 1, 1, 0, 0]])}   # sub-action 1 has no choice
    assert spaces.rows_without_valid_action(batch, gym_spaces.MultiDiscrete([3, 2])).tolist() \
        == [1, 2]
    assert spaces.rows_without_valid_action(batch, gym_spaces.Discrete(5)).tolist() == []
    assert len(spaces.rows_without_valid_action(np.zeros((2, 5)), gym_spaces.Discrete(5))) == 0


def test_the_normalizer_keeps_statistics_of_float_leaves_only():
    space = gym_spaces.Dict({"image": gym_spaces.Box(0, 255, (2, 2), np.uint8),
                             "v": gym_spaces.Box(-10, 10, (2,), np.float32),
                             "k": gym_spaces.Discrete(3)})
    batch = {"image": np.full((4, 2, 2), 200, np.uint8),
             "v": np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float32),
             "k": np.array([0, 1, 2, 1])}
    normalizer = ObsNormalizer(space, clip=10.0)
    normalizer.update(moments_of(batch))
    statistics = normalizer.statistics()
    assert list(statistics) == ["v"]
    assert np.allclose(statistics["v"][0], [4, 5]) and np.allclose(statistics["v"][1], [5, 5])
    out = normalize(batch, statistics)
    assert out["image"] is batch["image"] and out["k"] is batch["k"]
    assert np.allclose(out["v"][:, 0], (batch["v"][:, 0] - 4) / np.sqrt(5), atol=1e-6)
    restored = ObsNormalizer(space)
    restored.load_state_dict(normalizer.state_dict())
    assert np.allclose(restored.statistics()["v"][1], statistics["v"][1])
    # a Box space keeps the plain form (checkpoints of earlier runs load)
    plain = ObsNormalizer(gym_spaces.Box(-1, 1, (2,)))
    assert sorted(plain.state_dict()) == ["clip", "count", "m2", "mean"]


@pytest.mark.unit
def test_spaces_go_to_json_and_back():
    """core/space_codec.py: what a checkpoint's metadata says about its spaces (infinite Box
    bounds as strings, an image's uniform bounds as one number, Discrete starts kept)."""
    import json

    import gymnasium as gym
    from gymnasium import spaces as gs

    from core.space_codec import space_from_json, space_to_json
    cases = [gym.make("CartPole-v1").observation_space, gs.Box(-2.0, 2.0, (1,)),
             gs.Box(0, 255, (4, 84, 84), np.uint8), gs.MultiDiscrete([2, 3], start=[1, 0]),
             gs.Dict({"a": gs.Discrete(3, start=1), "action_mask": gs.MultiBinary(5),
                      "b": gs.Tuple([gs.MultiBinary(4), gs.Box(-np.inf, 0.0, (2,))])})]
    for space in cases:
        data = json.loads(json.dumps(space_to_json(space)))  # plain JSON, no inf literal
        assert space_from_json(data) == space, space
    assert space_to_json(cases[2])["low"] == 0.0 and space_to_json(cases[0])["high"][1] == "inf"
    with pytest.raises(ValueError, match="no JSON form"):
        space_to_json(gs.Text(5))
