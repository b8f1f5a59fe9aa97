"""dqn_agent: n-step replay transitions from fragments, and DQN gradients on replay batches.

On a rollout worker (an Ape-X actor) ``send_trajectory`` turns each fragment into n-step
transitions (agents/n_step.py: rewards summed over up to --n_step steps, cut at terminations,
bootstrapped at truncations, windows carried across fragments), which the worker hands the
replay buffer with initial priorities from ``priorities`` (|TD error| under its weights). On
the parameter server or a learner worker ``fetch_grads`` returns the model's gradients on a
replay batch.
"""
import numpy as np

from agents import register_agent
from agents.base import OffPolicyAgent
from agents.episodes import Episodes
from agents.n_step import Carry, n_step_transitions, step_transitions
from core.argtypes import positive_int, unit_interval
from core.types import GradientResult, Trajectory


@register_agent("dqn_agent")
class DQNAgent(OffPolicyAgent):
    """n-step transitions on the workers (Ape-X); Q-learning gradients on replay batches."""
    transition_discounts = True
    hands_whole_episodes = True

    @classmethod
    def her_problem(cls, config):
        if config.n_step > 1:
            return (f"--n_step {config.n_step}: a transition's reward is then a sum over up to "
                    f"{config.n_step} steps under the goal that was pursued, which a relabelled "
                    f"goal cannot recompute from one achieved goal. Use --n_step 1 with --her")
        return None

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

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.pending = None         # the Transitions of the fragments sent, until taken
        self.carry = None           # agents/n_step.py: windows open at the last fragment's end
        self.episodes = Episodes()  # with whole_episodes (--her): each env's unfinished episode
        self.weights_version = None

    def send_trajectory(self, trajectory: Trajectory):
        if self.whole_episodes:  # one-step transitions (her_problem refuses n > 1)
            steps = step_transitions(trajectory, terminal=True)
            steps = steps._replace(discounts=np.full(np.shape(steps.rewards), self.args.gamma,
                                                     dtype=np.float32))
            ends = (np.asarray(trajectory.terminated, dtype=bool)
                    | np.asarray(trajectory.truncated, dtype=bool))
            return {"transitions": int(self.episodes.add(steps, ends, trajectory.valid))}
        transitions, self.carry = n_step_transitions(trajectory, self.args.n_step,
                                                     self.args.gamma, self.carry)
        self.pending = transitions
        return {"transitions": int(len(transitions.rewards))}

    def take_transitions(self):
        if self.whole_episodes:
            return self.episodes.take()
        pending, self.pending = self.pending, None
        return pending

    def priorities(self, transitions):
        """Initial replay priorities |TD| under the weights loaded now (Ape-X's actors)."""
        return self.model.td_errors(transitions)

    def fetch_grads(self, weights, batch, weights_version=None, progress=0.0):
        if weights is not None and weights_version is None:
            raise ValueError("fetch_grads: give the weights_version of these weights")
        self.sync_weights(weights, weights_version)
        gradients, stats = self.model.step(batch, progress)
        num_samples = int(len(np.asarray(getattr(batch, "transitions", batch).rewards)))
        return GradientResult(gradients, num_samples, self.model.weights_version, stats)

    # -- checkpoints: the open windows are part of where the worker stands -------------------
    def get_state(self):
        return {**super().get_state(),
                "carry": None if self.carry is None else self.carry.to_state(),
                "episodes": self.episodes.get_state()}

    def set_state(self, state):
        super().set_state(state)
        self.carry = Carry.from_state(state.get("carry"))
        self.episodes.set_state(state.get("episodes"))

    def episodes_restarted(self):
        """Every env begins a new episode: no window or episode continues into the next
        fragment."""
        self.carry = None
        self.episodes.reset()
