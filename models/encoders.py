"""Observation encoders: CNNs for images, one-hots for indices, flattening for vectors, and one
encoder per leaf for structured observations (core/spaces.py).

The built-in models (ppo, sac) and plugin models build theirs with
``make_encoder(args, observation_space)``:

    encoder = make_encoder(args, observation_space)   # an nn.Module with .features_dim
    features = encoder(obs)                           # float [B, features_dim]

``obs`` is what core/spaces.py makes of the space: for a Box, a tensor [B, *shape] (uint8 or
float); for anything else a dict {leaf path: tensor [B, *leaf shape]}, which
``MultiInputEncoder`` encodes leaf by leaf (the action mask aside: it is no feature) and
concatenates in leaf order.

``--encoder auto`` (the default) picks by the space: a uint8 Box with an image layout (below) is
an image, encoded by the Nature DQN CNN when both its sides are at least 36 pixels (what that
CNN's strides need) and by ``SmallCNN`` below that (MiniGrid's 7x7 views, 16x16 grids); any
other Box is flattened; in a structured space the same holds per leaf, and Discrete and
MultiDiscrete leaves are one-hot, MultiBinary bits floats. ``--encoder_for path=kind`` sets a
leaf's encoder by hand.

Images stay uint8 from the env to the model (4x less memory and transfer than float32 in
fragments, replay and Ray's object store) and are scaled to [0, 1] here. Layouts: [H, W] (one
channel), [C, H, W] (channels first: a frame stack of grayscale frames), [H, W, C] (channels
last, RGB, told apart by a last side of 1, 3 or 4), [S, H, W, C] (a stack of RGB frames: S * C
channels).
"""
import argparse
from typing import Tuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from core import spaces as observations
from core.argtypes import positive_int
from core.errors import ConfigError

ENCODERS = ("auto", "mlp", "nature_cnn", "small_cnn")
LEAF_ENCODERS = ("flatten", "onehot", "small_cnn", "nature_cnn", "bow", "gru",
                 "cells")  # --encoder_for's kinds
FILM_KINDS = ("small_cnn", "cells")  # the leaf encoders --film can condition
MIN_IMAGE_SIDE = 36  # 8x8 stride 4, 4x4 stride 2, 3x3 stride 1 leave a 1x1 map at 36
# Smallest sides --encoder auto takes for an image: a uint8 [N, 2] or [N, 1] is likelier a
# table of bytes than a picture (SmallCNN itself takes any size, by --encoder small_cnn).
MIN_SMALL_IMAGE_SIDE = 3


def encoder_overrides(text) -> Tuple[str, ...]:
    """'image=small_cnn,direction=onehot' -> ('image=small_cnn', 'direction=onehot'); '' or
    'none' -> (). Kept as 'path=kind' strings, not pairs: a run's config.yaml and checkpoint
    store a tuple as a list, and a preset's list comes back to this function joined by
    commas, which strings survive. ``overrides()`` makes them a mapping."""
    items = []
    for item, path, kind in _split_pairs(text):
        if not path or kind not in LEAF_ENCODERS:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not path=kind: write e.g. image=small_cnn,direction=onehot"
                f" (paths as core/spaces.py names the observation's leaves; kinds: "
                f"{', '.join(LEAF_ENCODERS)})")
        items.append(f"{path}={kind}")
    return tuple(items)


def film_pairs(text) -> Tuple[str, ...]:
    """'image=mission' -> ('image=mission',); '' or 'none' -> (). Kept as strings for the same
    reason as ``encoder_overrides``; ``film_sources()`` makes them a mapping."""
    items = []
    for item, target, source in _split_pairs(text):
        if not target or not source or target == source:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not target=source: write e.g. image=mission (the leaf "
                f"whose convolutions are conditioned, then the leaf that conditions them, two "
                f"different leaves)")
        items.append(f"{target}={source}")
    return tuple(items)


def _split_pairs(text):
    """A flag's comma-separated 'left=right' items as (item, left, right), stripped; an item
    without '=' gives an empty left (it fails the caller's check); '' or 'none' gives none."""
    text = str(text).strip()
    if text.lower() in ("", "none"):
        return []
    return [(item.strip(), *(part.strip() for part in item.strip().rpartition("=")[::2]))
            for item in text.split(",")]


def _pairs(items):
    """('a=b', ...) as {a: b} (empty for None)."""
    return dict(item.rsplit("=", 1) for item in items or ())


def film_sources(args):
    """--film as {target path: source path}."""
    return _pairs(args.film)


def overrides(args):
    """--encoder_for as {path: kind} (empty for a config without the flag)."""
    return _pairs(args.encoder_for)


def add_encoder_args(parser):
    parser.add_argument("--encoder", choices=ENCODERS, default="auto",
                        help="how observations become features: nature_cnn (the Nature DQN "
                             "CNN, for images of 36 pixels a side and more), small_cnn (3x3 "
                             "convolutions, for small images and grids), mlp (flattened, into "
                             "the MLP), auto (a CNN for uint8 images, by their size, else mlp); "
                             "in a Dict or Tuple observation it chooses for the image leaves "
                             "(default: %(default)s)")
    parser.add_argument("--cnn_features", type=positive_int, default=512,
                        help="width of the Nature CNN's last (fully connected) layer "
                             "(default: %(default)s)")
    parser.add_argument("--small_cnn_features", type=positive_int, default=128,
                        help="width of SmallCNN's last (fully connected) layer: a quarter of "
                             "the Nature CNN's, for images that hold far fewer bits (a 7x7 "
                             "MiniGrid view is 147 bytes), which keeps a 16x16 grid's layer "
                             "(6400 inputs) at 0.8M weights (default: %(default)s)")
    parser.add_argument("--small_cnn_channels", type=channel_list, default=(16, 32, 64),
                        help="SmallCNN's convolutions: their output channels, one 3x3 layer "
                             "each (default: 16,32,64)")
    parser.add_argument("--small_cnn_padding", choices=["valid", "same"], default="valid",
                        help="SmallCNN's padding: valid (none: each layer shrinks the map by "
                             "2, a 7x7 view ends 1x1) or same (the map keeps its size, so every "
                             "cell keeps features of its own: a board game's, where a piece's "
                             "place is the whole point) (default: %(default)s)")
    parser.add_argument("--encoder_for", type=encoder_overrides, default=(),
                        help="the encoder of single leaves of a Dict/Tuple observation, as "
                             "path=kind pairs separated by commas, e.g. image=small_cnn,"
                             "direction=onehot; paths as core/spaces.py names them (Dict keys "
                             "and Tuple positions joined by /), kinds flatten, onehot "
                             "(Discrete, MultiDiscrete), small_cnn, nature_cnn (image Boxes), "
                             "cells (a grid of integer codes such as MiniGrid's view: each "
                             "code embedded as a symbol), bow and gru (word indices, e.g. "
                             "--text_keys mission: the mean of their embeddings, or a GRU over "
                             "them) (default: each leaf's --encoder auto choice)")
    parser.add_argument("--film", type=film_pairs, default=(),
                        help="FiLM (Perez et al. 2018; the BabyAI baselines' instruction "
                             "conditioning): target=source pairs of leaves of a Dict "
                             "observation, e.g. image=mission: after each convolution of the "
                             "target's encoder (small_cnn or cells) its maps are scaled and "
                             "shifted per channel by a linear function of the source leaf's "
                             "features, x * (1 + gamma(s)) + beta(s), starting as the identity; "
                             "the source's features are also concatenated as before "
                             "(default: none)")
    parser.add_argument("--word_dim", type=positive_int, default=32,
                        help="width of a word's embedding in the bow and gru encoders "
                             "(default: %(default)s)")
    parser.add_argument("--word_gru_size", type=positive_int, default=128,
                        help="the gru encoder's hidden size: its features (BabyAI's baselines: "
                             "128) (default: %(default)s)")


def channel_list(text):
    """'16,32,64' -> (16, 32, 64)."""
    try:
        channels = tuple(int(c) for c in str(text).split(",") if c.strip())
    except ValueError:
        channels = ()
    if not channels or min(channels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of channel counts; write "
                                         f"e.g. 16,32,64")
    return channels


def image_layout(shape):
    """(channels, height, width, permutation) that turns an observation of ``shape`` into
    [C, H, W] (the permutation applies to a batch [B, *shape], then S and C are merged); None
    when the shape is not an image."""
    if len(shape) == 2:
        return 1, shape[0], shape[1], None
    if len(shape) == 3:
        # [H, W, C] when the last side is a channel count and the first is not, or when both
        # look like one and the last is the smaller: a board game's planes (Connect Four's
        # 6x7x2, Tic-Tac-Toe's 3x3x2) are channels last, as PettingZoo Classic gives them
        small = (1, 2, 3, 4)
        if (shape[-1] in small and shape[0] not in small) or shape[-1] < shape[0] <= 4:
            return shape[2], shape[0], shape[1], (0, 3, 1, 2)
        return shape[0], shape[1], shape[2], None                 # [C, H, W]
    if len(shape) == 4 and shape[-1] in (1, 3, 4):                  # [S, H, W, C]
        return shape[0] * shape[3], shape[1], shape[2], (0, 1, 4, 2, 3)
    return None


def _min_side(space):
    layout = image_layout(space.shape) if isinstance(space, spaces.Box) else None
    return 0 if layout is None else min(layout[1], layout[2])


def is_image_space(space):
    """A uint8 image big enough for the Nature CNN."""
    return (isinstance(space, spaces.Box) and space.dtype == np.uint8
            and _min_side(space) >= MIN_IMAGE_SIDE)


def is_small_image_space(space):
    """A uint8 image too small for the Nature CNN: SmallCNN's, by --encoder auto."""
    return (isinstance(space, spaces.Box) and space.dtype == np.uint8
            and MIN_SMALL_IMAGE_SIDE <= _min_side(space) < MIN_IMAGE_SIDE)


def resolve_encoder(args, observation_space):
    """The encoder --encoder names for this Box space ('mlp', 'nature_cnn' or 'small_cnn'), or
    a ConfigError that says which spaces each one takes."""
    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"the observation space {observation_space} is not a Box: --encoder chooses among "
            f"the encoders of a Box (nature_cnn: uint8 images [H, W], [C, H, W], [H, W, C] or "
            f"[S, H, W, C]; small_cnn: small images; mlp: any Box, flattened). A structured "
            f"observation gets one encoder per leaf from make_encoder (MultiInputEncoder, "
            f"--encoder_for), in a model that takes it.")
    choice = args.encoder
    if choice == "auto":
        if is_image_space(observation_space):
            return "nature_cnn"
        return "small_cnn" if is_small_image_space(observation_space) else "mlp"
    if choice == "nature_cnn" and _min_side(observation_space) < MIN_IMAGE_SIDE:
        raise ConfigError(
            f"--encoder nature_cnn takes image observations of at least "
            f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} pixels ([H, W], [C, H, W], [H, W, C] or "
            f"[S, H, W, C]); this env's observation space is {observation_space}. Use "
            f"--encoder small_cnn for smaller images, mlp (or auto) for vector observations.")
    if choice == "small_cnn" and image_layout(observation_space.shape) is None:
        raise ConfigError(
            f"--encoder small_cnn takes image observations ([H, W], [C, H, W], [H, W, C] or "
            f"[S, H, W, C]); this env's observation space is {observation_space}. Use "
            f"--encoder mlp (or auto) for vector observations.")
    if choice not in ENCODERS:
        raise ConfigError(f"--encoder {choice!r} is not one of {', '.join(ENCODERS)}.")
    return choice


def _as_images(obs, permutation, channels, scale):
    """A batch [B, *shape] of images as float [B, C, H, W], scaled."""
    if permutation is not None:
        obs = obs.permute(*permutation)
    return obs.reshape(obs.shape[0], channels, *obs.shape[-2:]).float() * scale


def _orthogonal(module):
    """Orthogonal weights with gain sqrt(2), zero biases (as SB3 and the PPO paper's code)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, np.sqrt(2))
            nn.init.zeros_(layer.bias)


class ConvStack:
    """For encoders whose ``cnn`` is convolutions, ReLUs and a final Flatten, fed by ``maps(obs)``
    and followed by ``linear``: the features, and FiLM conditioning of each convolution's maps
    (``add_film``, --film: the linear maps are the submodule ``film``, absent without it)."""

    def add_film(self, condition_dim):
        """A linear map condition -> (gamma, beta) per convolution, zero at the start so that
        the conditioned encoder begins as the plain one."""
        convs = [layer for layer in self.cnn if isinstance(layer, nn.Conv2d)]
        self.film = nn.ModuleList(nn.Linear(condition_dim, 2 * conv.out_channels)
                                  for conv in convs)
        for layer in self.film:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, obs, condition=None):
        x = self.maps(obs)
        film = self._modules.get("film")
        if film is None:
            return self.linear(self.cnn(x))
        films = iter(film)
        for layer in self.cnn:
            x = layer(x)
            if isinstance(layer, nn.Conv2d):
                gamma, beta = next(films)(condition)[:, :, None, None].chunk(2, dim=1)
                x = x * (1.0 + gamma) + beta
        return self.linear(x)


class Flatten(nn.Module):
    """Vectors as they are (float32), anything else flattened: the MLP encoder."""

    def __init__(self, observation_space):
        super().__init__()
        self.features_dim = int(np.prod(observation_space.shape))

    def forward(self, obs):
        return obs.reshape(obs.shape[0], -1).float()


class NatureCNN(nn.Module):
    """Mnih et al. 2015: conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1, a fully connected
    ``features_dim`` layer, ReLU after each; uint8 pixels scaled by 1/255 first. Orthogonal
    weights with gain sqrt(2), zero biases (as SB3 and the PPO paper's code)."""

    def __init__(self, observation_space, features_dim=512):
        super().__init__()
        channels, height, width, self.permutation = image_layout(observation_space.shape)
        self.scale = 1.0 / 255.0 if observation_space.dtype == np.uint8 else 1.0
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten())
        with torch.no_grad():
            flat = self.cnn(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, features_dim), nn.ReLU())
        self.features_dim = features_dim
        self.channels = channels
        _orthogonal(self)

    def forward(self, obs):
        x = _as_images(obs, self.permutation, self.channels, self.scale)
        # Channels-last input: oneDNN's convolutions, forward and backward, run 1.2-1.4x faster
        # on it (measured on the 2-core CPU, batch 256 of 4x84x84); the weights keep the
        # default layout, so they travel and load as before.
        return self.linear(self.cnn(x.contiguous(memory_format=torch.channels_last)))


class SmallCNN(ConvStack, nn.Module):
    """For images too small for the Nature CNN's strides (MiniGrid's 7x7x3 view, 16x16 grids):
    three 3x3 convolutions of stride 1 without padding, 16, 32 and 64 channels (the MiniGrid
    baseline's widths, lcswillems/rl-starter-files), then a fully connected ``features_dim``
    layer, ReLU after each; uint8 scaled by 1/255 first, initialized as NatureCNN.

    Stride 1 and no pooling: on a 7x7 grid every cell is an object, and a stride would merge
    neighbours before the network sees them apart (7x7 ends as a 1x1 map of 64 features). A
    map side below 3 takes a kernel as wide as it is, so any size down to 1x1 works."""

    def __init__(self, observation_space, features_dim=128, widths=(16, 32, 64),
                 padding="valid"):
        super().__init__()
        channels, height, width, self.permutation = image_layout(observation_space.shape)
        self.scale = 1.0 / 255.0 if observation_space.dtype == np.uint8 else 1.0
        layers, last = [], channels
        for out in widths:
            if padding == "same":  # 3x3 with a border of 1: the map keeps its size
                layers += [nn.Conv2d(last, out, 3, padding=1), nn.ReLU()]
                last = out
                continue
            kernel = (min(3, height), min(3, width))
            layers += [nn.Conv2d(last, out, kernel), nn.ReLU()]
            height, width, last = height - kernel[0] + 1, width - kernel[1] + 1, out
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(last * height * width, features_dim), nn.ReLU())
        self.features_dim = features_dim
        self.channels = channels
        _orthogonal(self)

    def maps(self, obs):
        return _as_images(obs, self.permutation, self.channels, self.scale)


class OneHot(nn.Module):
    """Discrete and MultiDiscrete indices as concatenated one-hot vectors (a Discrete(n) index
    is a category, not a magnitude: index 3 is not 'more' than index 1)."""

    def __init__(self, space):
        super().__init__()
        nvec = ([int(space.n)] if isinstance(space, spaces.Discrete)
                else [int(n) for n in np.asarray(space.nvec).reshape(-1)])
        self.features_dim = sum(nvec)
        # the column where each component's one-hot starts: one scatter sets them all
        offsets = torch.as_tensor(np.cumsum([0] + nvec[:-1]), dtype=torch.long)
        self.register_buffer("offsets", offsets, persistent=False)

    def forward(self, obs):
        index = obs.reshape(obs.shape[0], -1).long() + self.offsets  # float leaves too
        out = torch.zeros(obs.shape[0], self.features_dim, device=obs.device)
        return out.scatter_(1, index, 1.0)


class SymbolicCells(ConvStack, nn.Module):
    """A grid of symbolic codes [H, W, C] (MiniGrid's and BabyAI's view: object, colour and
    state per cell, small integers, not intensities) read as symbols: each channel's code is
    embedded (its own table per channel), the embeddings summed per cell (the BabyAI baselines'
    bag-of-words image encoder), then the small CNN's 3x3 convolutions with same padding and a
    fully connected ``features_dim`` layer. A code is a category here: "red" (0) is not less
    than "green" (1), which flattening or a CNN on scaled bytes would make it."""

    def __init__(self, space, dim, widths, features_dim):
        super().__init__()
        channels, height, width, self.permutation = image_layout(space.shape)
        self.channels = channels
        codes = int(np.max(space.high)) + 1
        self.codes = codes
        self.embedding = nn.Embedding(channels * codes, dim)
        self.register_buffer("offsets", torch.arange(channels) * codes, persistent=False)
        layers, last = [], dim
        for out in widths:
            layers += [nn.Conv2d(last, out, 3, padding=1), nn.ReLU()]
            last = out
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(last * height * width, features_dim), nn.ReLU())
        self.features_dim = features_dim

    def maps(self, obs):
        grid = obs.long().clamp(0, self.codes - 1)
        if self.permutation is not None:
            grid = grid.permute(*self.permutation)
        grid = grid.reshape(grid.shape[0], self.channels, *grid.shape[-2:])  # [B, C, H, W]
        # one embedding per channel's code, summed per cell: [B, H, W, dim]
        cells = self.embedding(grid.permute(0, 2, 3, 1) + self.offsets).sum(dim=3)
        return cells.permute(0, 3, 1, 2)


class BagOfWords(nn.Module):
    """Word indices [B, L] (0: padding after the last word; envs/words.py) as the mean of their
    embeddings: the words without their order, which an instruction of BabyAI's grammar mostly
    does not need ("go to the red ball"). Written out rather than nn.EmbeddingBag, so that it
    exports to ONNX."""

    def __init__(self, space, dim):
        super().__init__()
        self.embedding = nn.Embedding(int(np.max(space.nvec)), dim, padding_idx=0)
        self.features_dim = dim

    def forward(self, obs):
        index = obs.reshape(obs.shape[0], -1).long()
        present = (index != 0).unsqueeze(-1).to(self.embedding.weight.dtype)
        total = (self.embedding(index) * present).sum(dim=1)
        return total / present.sum(dim=1).clamp(min=1.0)


class WordGRU(nn.Module):
    """Word indices [B, L] (0: padding after the last word) read in order by a GRU; its state
    after the last word is the feature (the BabyAI baselines' instruction encoder)."""

    def __init__(self, space, dim, hidden):
        super().__init__()
        self.embedding = nn.Embedding(int(np.max(space.nvec)), dim, padding_idx=0)
        self.gru = nn.GRU(dim, hidden, batch_first=True)
        self.features_dim = hidden

    def forward(self, obs):
        index = obs.reshape(obs.shape[0], -1).long()
        outputs, _ = self.gru(self.embedding(index))               # [B, L, hidden]
        last = ((index != 0).sum(dim=1) - 1).clamp(min=0)          # padding only at the end
        found = outputs.gather(1, last.view(-1, 1, 1).expand(-1, 1, outputs.shape[-1]))
        return found.squeeze(1) * (index != 0).any(dim=1, keepdim=True).to(outputs.dtype)


def leaf_kinds(leaf):
    """The --encoder_for kinds that fit a leaf."""
    space = leaf.space
    kinds = ["flatten"]
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        kinds.append("onehot")
    if isinstance(space, spaces.MultiDiscrete) and len(space.shape) == 1:
        kinds += ["bow", "gru"]
    if isinstance(space, spaces.Box) and image_layout(space.shape) is not None:
        kinds.append("small_cnn")
        if _min_side(space) >= MIN_IMAGE_SIDE:
            kinds.append("nature_cnn")
    if (isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.integer)
            and image_layout(space.shape) is not None):
        kinds.append("cells")
    return kinds


def _auto_kind(leaf, encoder):
    """A leaf's encoder when --encoder_for does not name it."""
    space = leaf.space
    if is_image_space(space) or is_small_image_space(space):
        if encoder == "mlp":
            return "flatten"
        if encoder == "auto":
            return "nature_cnn" if is_image_space(space) else "small_cnn"
        return encoder  # checked against leaf_kinds by the caller
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return "onehot"
    return "flatten"


def leaf_encoder(kind, leaf, args):
    if kind == "nature_cnn":
        return NatureCNN(leaf.space, args.cnn_features)
    if kind == "small_cnn":
        return SmallCNN(leaf.space, args.small_cnn_features, args.small_cnn_channels,
                        args.small_cnn_padding)
    if kind == "onehot":
        return OneHot(leaf.space)
    if kind == "bow":
        return BagOfWords(leaf.space, args.word_dim)
    if kind == "gru":
        return WordGRU(leaf.space, args.word_dim, args.word_gru_size)
    if kind == "cells":
        return SymbolicCells(leaf.space, args.word_dim, args.small_cnn_channels,
                             args.small_cnn_features)
    return Flatten(leaf.space)


class MultiInputEncoder(nn.Module):
    """One encoder per leaf of a structured observation (all but the action mask), their
    features concatenated in leaf order: a CNN per image, one-hots for indices, the rest
    flattened (SB3's CombinedExtractor, per leaf of any nesting). ``kinds`` holds each leaf's
    choice; ``has_cnn`` tells whether one of them is a CNN."""

    def __init__(self, args, observation_space):
        super().__init__()
        layout = observations.layout_of(observation_space)
        leaves = layout.feature_leaves()
        chosen = overrides(args)
        for path in chosen:
            if path not in layout.leaves or path == observations.ACTION_MASK:
                what = ("is the action mask, which is not a feature"
                        if path == observations.ACTION_MASK else "is not a leaf of it")
                raise ConfigError(
                    f"--encoder_for {path}={chosen[path]}: {path!r} {what}; the observation "
                    f"{observation_space} has the leaves "
                    f"{', '.join(leaf.path for leaf in leaves) or '(none)'}.")
        if not leaves:
            raise ConfigError(f"the observation {observation_space} has nothing to encode "
                              f"besides its {observations.ACTION_MASK!r}.")
        encoder = args.encoder
        self.paths, self.kinds, encoders = [], [], []
        for leaf in leaves:
            kind = chosen.get(leaf.path) or _auto_kind(leaf, encoder)
            if kind not in leaf_kinds(leaf):
                flag = (f"--encoder_for {leaf.path}={kind}" if leaf.path in chosen
                        else f"--encoder {kind}")
                raise ConfigError(
                    f"{flag}: the leaf {leaf.path!r} is {leaf.space}, which {kind} cannot "
                    f"encode; it takes {', '.join(leaf_kinds(leaf))} (nature_cnn needs an "
                    f"image of at least {MIN_IMAGE_SIDE} pixels a side, small_cnn an image, "
                    f"onehot a Discrete or MultiDiscrete, cells an integer image, bow and gru "
                    f"a 1-D MultiDiscrete of word indices). Set this leaf's encoder with "
                    f"--encoder_for {leaf.path}=<kind>.")
            self.paths.append(leaf.path)
            self.kinds.append(kind)
            encoders.append(leaf_encoder(kind, leaf, args))
        if encoder in ("nature_cnn", "small_cnn") and encoder not in self.kinds:
            raise ConfigError(
                f"--encoder {encoder}: no leaf of the observation {observation_space} is an "
                f"image it encodes (a uint8 Box [H, W], [C, H, W], [H, W, C] or [S, H, W, C]). "
                f"Use --encoder auto, or --encoder_for <path>={encoder} for a leaf that is an "
                f"image in another dtype.")
        self.encoders = nn.ModuleList(encoders)  # a list: Dict keys may hold '.', names not
        self.features_dim = sum(e.features_dim for e in encoders)
        self.has_cnn = any(kind.endswith("_cnn") for kind in self.kinds)
        # --film: each conditioned leaf's position and its source's; sources are encoded first
        self.film = {}
        sources, kinds = film_sources(args), dict(zip(self.paths, self.kinds))
        for target, source in sources.items():
            problem = (
                f"{target!r} is not a feature leaf of it" if target not in kinds else
                f"{source!r} is not a feature leaf of it" if source not in kinds else
                f"{target!r} is encoded by {kinds[target]}, which has no convolutions to "
                f"condition (small_cnn and cells have)"
                if kinds[target] not in FILM_KINDS else
                f"{source!r} is itself conditioned by --film" if source in sources else None)
            if problem:
                raise ConfigError(
                    f"--film {target}={source}: {problem}. The observation {observation_space} "
                    f"has the leaves "
                    + ", ".join(f"{p} ({k})" for p, k in kinds.items())
                    + "; condition an image leaf's small_cnn or cells encoder by another leaf, "
                      "e.g. --encoder_for image=cells,mission=bow --film image=mission.")
            t, src = self.paths.index(target), self.paths.index(source)
            self.encoders[t].add_film(self.encoders[src].features_dim)
            self.film[t] = src

    def forward(self, obs):
        if not self.film:
            return torch.cat([encoder(obs[path])
                              for path, encoder in zip(self.paths, self.encoders)], dim=-1)
        features = {}
        for i in sorted(range(len(self.paths)), key=lambda i: i in self.film):  # sources first
            encoder, leaf = self.encoders[i], obs[self.paths[i]]
            features[i] = (encoder(leaf, features[self.film[i]]) if i in self.film
                           else encoder(leaf))
        return torch.cat([features[i] for i in range(len(self.paths))], dim=-1)


def make_encoder(args, observation_space):
    """The encoder module for ``observation_space`` (``.features_dim`` wide): for a Box, a
    NatureCNN, a SmallCNN or a Flatten (PPO and SAC tell images from vectors by that class);
    for any other space a MultiInputEncoder."""
    if observations.layout_of(observation_space).structured:
        return MultiInputEncoder(args, observation_space)
    if overrides(args) or film_sources(args):
        raise ConfigError(
            f"--{'encoder_for' if overrides(args) else 'film'} "
            f"{','.join(args.encoder_for or args.film)}: it sets the encoders of the leaves "
            f"of a Dict or Tuple observation; this env's observation is the single Box "
            f"{observation_space}, whose encoder --encoder chooses.")
    choice = resolve_encoder(args, observation_space)
    if choice == "nature_cnn":
        return NatureCNN(observation_space, args.cnn_features)
    if choice == "small_cnn":
        return SmallCNN(observation_space, args.small_cnn_features, args.small_cnn_channels,
                        args.small_cnn_padding)
    return Flatten(observation_space)
