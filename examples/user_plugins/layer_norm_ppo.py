"""A model plugin kept outside ddrl: ppo whose hidden layers are followed by LayerNorm."""
from torch import nn

from models import register_model
from models.ppo import PPOModel


@register_model("layer_norm_ppo")
class LayerNormPPO(PPOModel):
    """ppo with LayerNorm after every hidden layer when --layer_norm is given."""

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--layer_norm", action="store_true",
                            help="insert LayerNorm after every hidden layer")

    def build_networks(self, args):
        super().build_networks(args)
        if args.layer_norm:
            self.actor = self._with_layer_norm(self.actor)
            self.critic = self._with_layer_norm(self.critic)

    @staticmethod
    def _with_layer_norm(net):
        layers = []
        for layer in net:
            layers.append(layer)
            if isinstance(layer, (nn.Tanh, nn.ReLU, nn.ELU)):
                layers.append(nn.LayerNorm(layers[-2].out_features))
        return nn.Sequential(*layers)
