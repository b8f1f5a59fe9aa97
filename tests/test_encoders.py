"""Observation encoders (models/encoders.py): the encoder of each leaf of a structured
observation, one-hots worked out by hand, --encoder_for and its errors, small images through
--encoder auto, and the state-dict names of the Box encoders that checkpoints hold."""
import argparse
import typing

import numpy as np
import pytest
import torch
from gymnasium import spaces

from core.config import flag_actions, make_config
from core.errors import ConfigError
from models.encoders import (Flatten, MultiInputEncoder, NatureCNN, OneHot, SmallCNN,
                             add_encoder_args, encoder_overrides, image_layout, make_encoder,
                             resolve_encoder)

pytestmark = pytest.mark.unit

MINIGRID = spaces.Dict({"image": spaces.Box(0, 255, (7, 7, 3), np.uint8),
                        "direction": spaces.Discrete(4),
                        "pos": spaces.Box(-1, 1, (3,), np.float32)})


def args_for(*flags):
    parser = argparse.ArgumentParser()
    add_encoder_args(parser)
    return parser.parse_args(list(flags))


def batch(space, size=5, seed=0):
    """``size`` samples of ``space`` as core/spaces.py carries them, as tensors."""
    from core import spaces as observations
    space.seed(seed)
    layout = observations.layout_of(space)
    trees = [layout.encode(space.sample()) for _ in range(size)]
    return {k: torch.as_tensor(v) for k, v in observations.stack(trees).items()}


def test_each_leaf_gets_its_encoder():
    encoder = make_encoder(args_for(), MINIGRID)
    assert isinstance(encoder, MultiInputEncoder) and encoder.has_cnn
    # gymnasium's Dict sorts its keys: the leaves come in that order
    assert encoder.paths == ["direction", "image", "pos"]
    assert encoder.kinds == ["onehot", "small_cnn", "flatten"]
    assert [type(e) for e in encoder.encoders] == [OneHot, SmallCNN, Flatten]
    assert encoder.features_dim == 4 + 128 + 3
    obs = batch(MINIGRID)
    assert obs["image"].dtype == torch.uint8 and obs["direction"].dtype == torch.int64
    out = encoder(obs).detach()
    assert out.shape == (5, 135) and out.dtype == torch.float32
    np.testing.assert_array_equal(out[:, :4].numpy(), np.eye(4)[obs["direction"].numpy()])
    torch.testing.assert_close(out[:, 132:], obs["pos"])
    # indices that arrive as floats (a float32 batch) give the same one-hots
    torch.testing.assert_close(encoder({**obs, "direction": obs["direction"].float()}).detach(),
                               out)


def test_one_hots_by_hand():
    discrete = OneHot(spaces.Discrete(4))
    assert discrete(torch.tensor([0, 3, 1])).tolist() == [[1, 0, 0, 0], [0, 0, 0, 1],
                                                          [0, 1, 0, 0]]
    multi = OneHot(spaces.MultiDiscrete([3, 2]))
    assert multi.features_dim == 5
    assert multi(torch.tensor([[2, 1], [0, 0]])).tolist() == [[0, 0, 1, 0, 1],
                                                              [1, 0, 0, 1, 0]]
    grid = OneHot(spaces.MultiDiscrete([[2, 3], [1, 2]]))  # C order: 2, 3, 1, 2 columns
    assert grid(torch.tensor([[[1, 2], [0, 0]]])).tolist() == [[0, 1, 0, 0, 1, 1, 1, 0]]
    assert OneHot(spaces.Discrete(3)).state_dict() == {}  # the offsets are no weights


def test_a_tuple_with_multi_discrete_and_multi_binary_leaves():
    space = spaces.Tuple([spaces.Discrete(3), spaces.MultiDiscrete([[2, 3], [4, 2]]),
                          spaces.MultiBinary(3), spaces.Box(0, 1, (2, 2), np.float32)])
    encoder = make_encoder(args_for(), space)
    assert encoder.paths == ["0", "1", "2", "3"]
    assert encoder.kinds == ["onehot", "onehot", "flatten", "flatten"]
    assert not encoder.has_cnn
    assert encoder.features_dim == 3 + 11 + 3 + 4
    obs = batch(space)
    out = encoder(obs)
    assert out.shape == (5, 21)
    assert (out[:, 3:14].sum(-1) == 4).all()  # one hot per MultiDiscrete component
    torch.testing.assert_close(out[:, 14:17], obs["2"].float())  # the bits, as 0./1.
    torch.testing.assert_close(out[:, 17:], obs["3"].reshape(5, 4))


def test_a_single_discrete_observation_is_one_hot():
    encoder = make_encoder(args_for(), spaces.Discrete(16))  # FrozenLake's
    assert encoder.paths == ["obs"] and encoder.features_dim == 16
    assert encoder({"obs": torch.tensor([5])})[0].argmax().item() == 5


def test_the_action_mask_is_no_feature():
    space = spaces.Dict({"action_mask": spaces.MultiBinary(4),
                         "pos": spaces.Box(-1, 1, (3,), np.float32)})
    encoder = make_encoder(args_for(), space)
    assert encoder.paths == ["pos"] and encoder.features_dim == 3
    assert encoder(batch(space)).shape == (5, 3)
    with pytest.raises(ConfigError, match="nothing to encode"):
        make_encoder(args_for(), spaces.Dict({"action_mask": spaces.MultiBinary(4)}))


def test_encoder_for_sets_single_leaves():
    encoder = make_encoder(args_for("--encoder_for", "image=flatten, direction=flatten"),
                           MINIGRID)
    assert encoder.kinds == ["flatten", "flatten", "flatten"] and not encoder.has_cnn
    assert encoder.features_dim == 1 + 147 + 3
    big = spaces.Dict({"pixels": spaces.Box(0, 255, (84, 84, 3), np.uint8)})
    assert make_encoder(args_for(), big).kinds == ["nature_cnn"]
    assert make_encoder(args_for("--encoder_for", "pixels=small_cnn"), big).kinds == ["small_cnn"]
    floats = spaces.Dict({"depth": spaces.Box(0, 1, (8, 8), np.float32)})
    assert make_encoder(args_for(), floats).kinds == ["flatten"]  # auto: uint8 only
    assert make_encoder(args_for("--encoder_for", "depth=small_cnn"), floats).kinds == [
        "small_cnn"]


@pytest.mark.parametrize("flag, message", [
    ("image=nature_cnn", r"--encoder_for image=nature_cnn: the leaf 'image' is Box\(0, 255, "
                         r"\(7, 7, 3\), uint8\).* takes flatten, small_cnn"),
    ("pos=onehot", r"'pos' is Box.* takes flatten \("),
    ("direction=small_cnn", r"'direction' is Discrete\(4\).* takes flatten, onehot"),
    ("nope=flatten", r"'nope' is not a leaf of it.* leaves direction, image, pos"),
])
def test_encoder_for_errors_name_the_leaf_and_what_it_takes(flag, message):
    with pytest.raises(ConfigError, match=message):
        make_encoder(args_for("--encoder_for", flag), MINIGRID)


def test_encoder_for_errors_on_the_mask_and_on_a_box():
    space = spaces.Dict({"action_mask": spaces.MultiBinary(2), "x": spaces.Discrete(2)})
    with pytest.raises(ConfigError, match="is the action mask, which is not a feature"):
        make_encoder(args_for("--encoder_for", "action_mask=flatten"), space)
    with pytest.raises(ConfigError, match="single Box"):
        make_encoder(args_for("--encoder_for", "obs=flatten"), spaces.Box(-1, 1, (3,)))


@pytest.mark.parametrize("text", ["image", "image=cnn", "=flatten", "image=flatten,"])
def test_encoder_for_parse_errors(text):
    with pytest.raises(argparse.ArgumentTypeError, match="is not path=kind"):
        encoder_overrides(text)


def test_encoder_for_is_frozen_and_survives_a_config_file():
    value = encoder_overrides("image=small_cnn,direction=onehot")
    assert value == ("image=small_cnn", "direction=onehot")
    # config.yaml and checkpoints store it as a list, which a preset hands back comma-joined
    assert encoder_overrides(",".join(list(value))) == value
    assert encoder_overrides("none") == encoder_overrides("") == ()
    actions = flag_actions(add_encoder_args)
    config = make_config("EncoderConfig", actions, vars(args_for("--encoder_for",
                                                                 "image=flatten")))
    assert config.encoder_for == ("image=flatten",) and config.small_cnn_features == 128
    hash(config)  # frozen, with hashable values
    field = {f.name: f.type for f in config.__dataclass_fields__.values()}
    assert field["encoder_for"] == typing.Tuple[str, ...]


def test_the_global_encoder_chooses_for_image_leaves():
    assert make_encoder(args_for("--encoder", "mlp"), MINIGRID).kinds == [
        "onehot", "flatten", "flatten"]
    assert make_encoder(args_for("--encoder", "small_cnn"), MINIGRID).kinds == [
        "onehot", "small_cnn", "flatten"]
    with pytest.raises(ConfigError, match=r"--encoder nature_cnn: the leaf 'image'"):
        make_encoder(args_for("--encoder", "nature_cnn"), MINIGRID)
    with pytest.raises(ConfigError, match="no leaf of the observation .* is an image"):
        make_encoder(args_for("--encoder", "small_cnn"),
                     spaces.Dict({"x": spaces.Discrete(3)}))


@pytest.mark.parametrize("shape", [(16, 16), (16, 16, 1), (7, 7, 3), (3, 3), (2, 16, 16)])
def test_a_small_uint8_image_box_takes_the_small_cnn(shape):
    space = spaces.Box(0, 255, shape, np.uint8)
    assert resolve_encoder(args_for(), space) == "small_cnn"
    encoder = make_encoder(args_for(), space)
    assert type(encoder) is SmallCNN and encoder.features_dim == 128
    pixels = torch.randint(0, 256, (4, *shape), dtype=torch.uint8)
    out = encoder(pixels)
    assert out.shape == (4, 128) and out.dtype == torch.float32 and (out >= 0).all()


def test_small_cnn_scales_uint8_to_unit_range():
    grid = SmallCNN(spaces.Box(0, 255, (16, 16), np.uint8))
    pixels = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    torch.testing.assert_close(grid(pixels),
                               grid.linear(grid.cnn(pixels.unsqueeze(1).float() / 255.0)))
    view = SmallCNN(spaces.Box(0, 255, (7, 7, 3), np.uint8))  # channels last
    pixels = torch.randint(0, 256, (3, 7, 7, 3), dtype=torch.uint8)
    torch.testing.assert_close(view(pixels), view.linear(view.cnn(
        pixels.permute(0, 3, 1, 2).float() / 255.0)))


def test_small_cnn_sizes():
    def convs(shape):
        cnn = SmallCNN(spaces.Box(0, 255, shape, np.uint8), 32)
        return [m.kernel_size for m in cnn.cnn if isinstance(m, torch.nn.Conv2d)], \
            cnn.linear[0].in_features
    assert convs((7, 7, 3)) == ([(3, 3)] * 3, 64)           # 7 -> 5 -> 3 -> 1
    assert convs((16, 16)) == ([(3, 3)] * 3, 64 * 10 * 10)  # 16 -> 14 -> 12 -> 10
    assert convs((4, 4)) == ([(3, 3), (2, 2), (1, 1)], 64)  # a side below 3: its own width
    assert convs((2, 1)) == ([(2, 1), (1, 1), (1, 1)], 64)  # by --encoder small_cnn only
    assert resolve_encoder(args_for(), spaces.Box(0, 255, (2, 16), np.uint8)) == "mlp"
    assert make_encoder(args_for("--small_cnn_features", "32"),
                        spaces.Box(0, 255, (8, 8), np.uint8)).features_dim == 32


def test_small_cnn_same_padding_keeps_the_board_and_takes_its_widths():
    board = spaces.Box(0, 1, (6, 7, 2), np.int8)          # Connect Four's planes
    encoder = make_encoder(args_for("--encoder", "small_cnn", "--small_cnn_padding", "same",
                                    "--small_cnn_channels",
                                    "8,4", "--small_cnn_features", "16"), board)
    convs = [m for m in encoder.cnn if isinstance(m, torch.nn.Conv2d)]
    assert [(m.in_channels, m.out_channels, m.padding) for m in convs] == [(2, 8, (1, 1)),
                                                                           (8, 4, (1, 1))]
    assert encoder.linear[0].in_features == 4 * 6 * 7       # every cell keeps its features
    assert encoder(torch.zeros(3, 6, 7, 2, dtype=torch.int8)).shape == (3, 16)
    with pytest.raises(SystemExit):
        args_for("--small_cnn_channels", "8,x")
    # board planes are channels last (PettingZoo Classic), images as before
    assert image_layout((6, 7, 2)) == (2, 6, 7, (0, 3, 1, 2))      # Connect Four
    assert image_layout((3, 3, 2)) == (2, 3, 3, (0, 3, 1, 2))      # Tic-Tac-Toe
    assert image_layout((7, 7, 3)) == (3, 7, 7, (0, 3, 1, 2))      # MiniGrid's view
    assert image_layout((4, 84, 84)) == (4, 84, 84, None)          # stacked Atari frames


def test_box_encoders_and_their_state_dict_names_are_unchanged():
    vector = make_encoder(args_for(), spaces.Box(-1, 1, (8,), np.float32))
    assert type(vector) is Flatten and vector.features_dim == 8 and vector.state_dict() == {}
    assert type(make_encoder(args_for(), spaces.Box(0, 255, (128,), np.uint8))) is Flatten
    cnn = make_encoder(args_for(), spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert type(cnn) is NatureCNN
    assert list(cnn.state_dict()) == ["cnn.0.weight", "cnn.0.bias", "cnn.2.weight",
                                      "cnn.2.bias", "cnn.4.weight", "cnn.4.bias",
                                      "linear.0.weight", "linear.0.bias"]
    assert [tuple(v.shape) for v in cnn.state_dict().values()] == [
        (32, 4, 8, 8), (32,), (64, 32, 4, 4), (64,), (64, 64, 3, 3), (64,), (512, 3136), (512,)]
    assert type(make_encoder(args_for("--encoder", "mlp"),
                             spaces.Box(0, 255, (16, 16), np.uint8))) is Flatten


def test_ppo_on_a_small_uint8_grid_acts_and_learns():
    """The issue's crash: a 16x16 uint8 grid reached the MLP as bytes ('mat1 and mat2 must have
    the same dtype'); --encoder auto now gives it the SmallCNN, which scales it."""
    from models.ppo import PPOBatch, PPOModel
    parser = argparse.ArgumentParser()
    PPOModel.add_args(parser)
    space = spaces.Box(0, 255, (16, 16), np.uint8)
    model = PPOModel(parser.parse_args([]), space, spaces.Discrete(4))
    assert isinstance(model.encoder, SmallCNN)
    obs = np.random.default_rng(0).integers(0, 256, (6, 16, 16), dtype=np.uint8)
    actions, extras = model.choose_actions(obs)
    assert actions.shape == (6,) and extras["values"].shape == (6,)
    zeros = torch.zeros(6)
    gradients, stats = model.step(PPOBatch(torch.as_tensor(obs), torch.as_tensor(actions),
                                           torch.as_tensor(extras["log_probs"]), zeros, zeros,
                                           zeros))
    assert np.isfinite(stats["policy_loss"]) and any(k.startswith("encoder.") for k in gradients)


# -- --film: an image leaf's convolutions conditioned by another leaf --------------------------
WORDS = spaces.Dict({"image": spaces.Box(0, 10, (5, 5, 3), np.uint8),
                     "mission": spaces.MultiDiscrete([20] * 4)})


@pytest.mark.parametrize("kind", ["small_cnn", "cells"])
def test_film_starts_as_the_plain_encoder_and_then_lets_the_source_steer_the_maps(kind):
    flags = ("--encoder_for", f"image={kind},mission=bow", "--small_cnn_padding", "same")
    torch.manual_seed(0)
    plain = make_encoder(args_for(*flags), WORDS)
    torch.manual_seed(0)
    film = make_encoder(args_for(*flags, "--film", "image=mission"), WORDS)
    assert film.features_dim == plain.features_dim and film.film == {0: 1}
    image = film.encoders[0]
    assert [layer.out_features for layer in image.film] == [2 * w for w in (16, 32, 64)]
    obs = batch(WORDS)
    # the same weights elsewhere and FiLM's zero start: the same features
    film.load_state_dict(plain.state_dict(), strict=False)
    torch.testing.assert_close(film(obs), plain(obs))
    # gamma and beta by hand for the first convolution, the rest left at the identity
    with torch.no_grad():
        image.film[0].weight.normal_()
    words = film.encoders[1](obs["mission"])
    gamma, beta = image.film[0](words).chunk(2, dim=1)
    x = image.maps(obs["image"])
    layers = list(image.cnn)
    x = layers[0](x) * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
    for layer in layers[1:]:
        x = layer(x)
    expected = torch.cat([image.linear(x), words], dim=-1)
    torch.testing.assert_close(film(obs), expected)
    # another mission, the same view: other image features
    other = {**obs, "mission": (obs["mission"] + 1) % 20}
    assert not torch.allclose(film(other)[:, :image.features_dim],
                              film(obs)[:, :image.features_dim])


@pytest.mark.parametrize("flags, message", [
    (("--encoder_for", "image=flatten", "--film", "image=mission"),
     r"'image' is encoded by flatten, which has no convolutions"),
    (("--encoder_for", "image=cells", "--film", "image=nope"), r"'nope' is not a feature leaf"),
    (("--encoder_for", "image=cells", "--film", "view=mission"), r"'view' is not a feature leaf"),
])
def test_film_errors_name_the_leaves_and_their_encoders(flags, message):
    with pytest.raises(ConfigError, match=message + r".*mission \(onehot\)"):
        make_encoder(args_for(*flags), WORDS)


def test_film_parse_errors_and_a_box():
    from models.encoders import film_pairs
    assert film_pairs("image=mission, a/b=c") == ("image=mission", "a/b=c")
    assert film_pairs("none") == film_pairs("") == ()
    for text in ("image", "image=", "=mission", "image=image"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not target=source"):
            film_pairs(text)
    with pytest.raises(ConfigError, match="--film image=mission: .*single Box"):
        make_encoder(args_for("--film", "image=mission"), spaces.Box(-1, 1, (3,)))
    two = spaces.Dict({"a": spaces.Box(0, 10, (5, 5, 3), np.uint8),
                       "b": spaces.Box(0, 10, (5, 5, 3), np.uint8)})
    with pytest.raises(ConfigError, match="--film a=b: 'b' is itself conditioned"):
        make_encoder(args_for("--encoder_for", "a=cells,b=cells", "--film", "a=b,b=a"), two)
