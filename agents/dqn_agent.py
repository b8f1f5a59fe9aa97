"""dqn_agent: n-step replay transitions from fragments, and DQN gradients on replay batches.

On a rollout worker (an Ape-X actor) each fragment becomes n-step transitions (agents/n_step.py:
rewards summed over up to --n_step steps, cut at terminations, bootstrapped at truncations,
windows carried across fragments), which the worker hands the replay buffer with initial
priorities (|TD error| under its weights). Whole episodes for --her (one-step transitions
only), priorities, gradients and checkpoints are agents/replay_agent.py's.
"""
import numpy as np

from agents import register_agent
from agents.n_step import Carry, n_step_transitions, step_transitions
from agents.replay_agent import ReplayAgent
from core.argtypes import positive_int, unit_interval
from core.types import Trajectory


@register_agent("dqn_agent")
class DQNAgent(ReplayAgent):
    """n-step transitions on the workers (Ape-X); Q-learning gradients on replay batches."""
    transition_discounts = True

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gamma", type=unit_interval, default=0.99,
                            help="discount factor of the n-step returns and of the value "
                                 "they bootstrap from (default: %(default)s)")
        parser.add_argument("--n_step", type=positive_int, default=1,
                            help="n: rewards summed over up to n steps per transition, "
                                 "computed on the workers across fragment ends; a return "
                                 "stops at a termination (no bootstrap) or a truncation "
                                 "(bootstrapped from the final observation) "
                                 "(default: %(default)s)")

    @classmethod
    def her_problem(cls, config):
        if config.n_step > 1:
            return (f"--n_step {config.n_step}: a transition's reward is then a sum over up to "
                    f"{config.n_step} steps under the goal that was pursued, which a relabelled "
                    f"goal cannot recompute from one achieved goal. Use --n_step 1 with --her")
        return None

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.carry = None  # agents/n_step.py: windows open at the last fragment's end

    def fragment_transitions(self, trajectory: Trajectory):
        transitions, self.carry = n_step_transitions(trajectory, self.args.n_step,
                                                     self.args.gamma, self.carry)
        return transitions

    def episode_steps(self, trajectory: Trajectory):
        """One-step transitions (her_problem refuses n > 1), each with its discount gamma."""
        steps = step_transitions(trajectory, terminal=True)
        return steps._replace(discounts=np.full(np.shape(steps.rewards), self.args.gamma,
                                                dtype=np.float32))

    # -- checkpoints: the open windows are part of where the worker stands -------------------
    def get_state(self):
        return {**super().get_state(),
                "carry": None if self.carry is None else self.carry.to_state()}

    def set_state(self, state):
        super().set_state(state)
        self.carry = Carry.from_state(state.get("carry"))

    def episodes_restarted(self):
        """Every env begins a new episode: no window or episode continues into the next
        fragment."""
        super().episodes_restarted()
        self.carry = None
