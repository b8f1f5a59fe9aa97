"""A plugin model on pixels: PPO whose two heads each get a hidden layer on the Nature CNN.

    python main.py --user_dir tests/plugins --model_name pixel_ppo --gym_id ALE/Breakout-v5
"""
from models import register_model
from models.encoders import make_encoder
from models.ppo import PPOModel, mlp


@register_model("pixel_ppo")
class PixelPPO(PPOModel):
    """PPO with a --head_width ReLU layer in each head, on a shared encoder."""

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--head_width", type=int, default=128,
                            help="width of the hidden layer of each head (default: %(default)s)")

    def build_networks(self, args):
        # The Nature CNN on images, flattening on vectors (--encoder); PPOModel.features()
        # runs it once per batch for both heads.
        self.encoder = make_encoder(args, self.observation_space)
        width = self.encoder.features_dim
        self.actor = mlp(width, [args.head_width], self.action_dim, "relu", 0.01)
        self.critic = mlp(width, [args.head_width], 1, "relu", 1.0)
