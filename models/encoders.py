"""Observation encoders: the Nature DQN CNN for images, flattening for vectors.

``--encoder auto`` (the default) picks from the observation space: a uint8 Box of 2 to 4
dimensions whose two image sides are at least 36 pixels (what the CNN's strides need) is an
image, anything else Box is a vector. The built-in models (ppo, sac) and plugin models build
theirs with ``make_encoder(args, observation_space)``:

    encoder = make_encoder(args, observation_space)   # an nn.Module with .features_dim
    features = encoder(obs)                           # obs: [B, *shape] uint8 or float

Images stay uint8 from the env to the model (4x less memory and transfer than float32 in
fragments, replay and Ray's object store) and are scaled to [0, 1] here. Layouts: [H, W] (one
channel), [C, H, W] (channels first: a frame stack of grayscale frames), [H, W, C] (channels
last, RGB, told apart by a last side of 1, 3 or 4), [S, H, W, C] (a stack of RGB frames: S * C
channels).
"""
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from core.argtypes import positive_int
from core.registry import ConfigError

ENCODERS = ("auto", "mlp", "nature_cnn")
MIN_IMAGE_SIDE = 36  # 8x8 stride 4, 4x4 stride 2, 3x3 stride 1 leave a 1x1 map at 36


def add_encoder_args(parser):
    parser.add_argument("--encoder", choices=ENCODERS, default="auto",
                        help="how observations become features: nature_cnn (the Nature DQN "
                             "CNN, for images), mlp (flattened, into the MLP), auto (nature_cnn "
                             "for uint8 image spaces, else mlp) (default: %(default)s)")
    parser.add_argument("--cnn_features", type=positive_int, default=512,
                        help="width of the Nature CNN's last (fully connected) layer "
                             "(default: %(default)s)")


def image_layout(shape):
    """(channels, height, width, permutation) that turns an observation of ``shape`` into
    [C, H, W] (the permutation applies to a batch [B, *shape], then S and C are merged); None
    when the shape is not an image."""
    if len(shape) == 2:
        return 1, shape[0], shape[1], None
    if len(shape) == 3:
        if shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4):  # [H, W, C]
            return shape[2], shape[0], shape[1], (0, 3, 1, 2)
        return shape[0], shape[1], shape[2], None                 # [C, H, W]
    if len(shape) == 4 and shape[-1] in (1, 3, 4):                  # [S, H, W, C]
        return shape[0] * shape[3], shape[1], shape[2], (0, 1, 4, 2, 3)
    return None


def is_image_space(space):
    if not isinstance(space, spaces.Box) or space.dtype != np.uint8:
        return False
    layout = image_layout(space.shape)
    return layout is not None and min(layout[1], layout[2]) >= MIN_IMAGE_SIDE


def resolve_encoder(args, observation_space):
    """The encoder --encoder names for this space ('mlp' or 'nature_cnn'), or a ConfigError
    that says which spaces each one takes."""
    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"the observation space {observation_space} is not a Box: the built-in encoders "
            f"take Box observations (nature_cnn: uint8 images [H, W], [C, H, W], [H, W, C] or "
            f"[S, H, W, C]; mlp: any Box, flattened). Flatten or encode the observation in the "
            f"env wrapper (gymnasium.wrappers.FlattenObservation for a Dict), or write a model "
            f"for this space.")
    choice = args.encoder
    if choice == "auto":
        return "nature_cnn" if is_image_space(observation_space) else "mlp"
    if choice == "nature_cnn":
        layout = image_layout(observation_space.shape)
        if layout is None or min(layout[1], layout[2]) < MIN_IMAGE_SIDE:
            raise ConfigError(
                f"--encoder nature_cnn takes image observations of at least "
                f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} pixels ([H, W], [C, H, W], [H, W, C] or "
                f"[S, H, W, C]); this env's observation space is {observation_space}. Use "
                f"--encoder mlp (or auto) for vector observations.")
    if choice not in ENCODERS:
        raise ConfigError(f"--encoder {choice!r} is not one of {', '.join(ENCODERS)}.")
    return choice


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
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(module.weight, np.sqrt(2))
                nn.init.zeros_(module.bias)

    def forward(self, obs):
        if self.permutation is not None:
            obs = obs.permute(*self.permutation)
        x = obs.reshape(obs.shape[0], self.channels, *obs.shape[-2:]).float() * self.scale
        # Channels-last input: oneDNN's convolutions, forward and backward, run 1.2-1.4x faster
        # on it (measured on the 2-core CPU, batch 256 of 4x84x84); the weights keep the
        # default layout, so they travel and load as before.
        return self.linear(self.cnn(x.contiguous(memory_format=torch.channels_last)))


def make_encoder(args, observation_space):
    """The encoder module for ``observation_space`` (``.features_dim`` wide)."""
    if resolve_encoder(args, observation_space) == "nature_cnn":
        return NatureCNN(observation_space, args.cnn_features)
    return Flatten(observation_space)
