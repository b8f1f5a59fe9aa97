"""An agent plugin kept outside ddrl: the default agent with rewards scaled before GAE."""
import dataclasses

from agents import register_agent
from agents.default_agent import DefaultAgent


@register_agent("scaled_reward_agent")
class ScaledRewardAgent(DefaultAgent):
    """default_agent with rewards multiplied by --reward_scale before advantages are computed."""

    @staticmethod
    def add_args(parser):
        DefaultAgent.add_args(parser)
        parser.add_argument("--reward_scale", type=float, default=0.1,
                            help="multiply rewards by this before GAE (default: %(default)s)")

    def send_trajectory(self, trajectory):
        scaled = dataclasses.replace(trajectory,
                                     rewards=trajectory.rewards * self.args.reward_scale)
        return super().send_trajectory(scaled)
