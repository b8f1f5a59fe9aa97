"""sac_agent: turns fragments into one-step replay transitions, and replay batches into SAC
gradients (the rest, whole episodes for --her, priorities and checkpoints, is
agents/replay_agent.py's)."""
import numpy as np

from agents import register_agent
from agents.n_step import step_transitions
from agents.replay_agent import ReplayAgent
from core import spaces
from core.types import Trajectory


@register_agent("sac_agent")
class SACAgent(ReplayAgent):
    """Replay transitions from fragments (bootstrapping at truncation); SAC gradients on batches."""

    @staticmethod
    def transitions(trajectory: Trajectory):
        """The fragment ([T, E] time-major) as up to N = T * E transitions, in row-major (t, e)
        order.

        The next observation of step (t, e) is the observation stored at (t + 1, e), or
        ``last_observations[e]`` for the fragment's last step. Where that step ended its episode
        the stored one is the reset observation of the next episode: harmless after a
        termination (terminated = 1 masks the bootstrap), wrong after a truncation, so truncated
        steps get their final observation from ``truncated_observations`` instead (a time limit
        is not a terminal state; they keep terminated = 0 and bootstrap). Steps whose env raised
        (``trajectory.valid`` False) are not transitions and are dropped.
        """
        steps = SACAgent.step_transitions(trajectory)
        n = len(steps.rewards) * np.shape(steps.rewards)[1]
        keep = (slice(None) if trajectory.valid is None
                else np.asarray(trajectory.valid, dtype=bool).reshape(n))
        return steps._replace(**{
            name: spaces.tree_map(lambda a: a.reshape(n, *a.shape[2:])[keep], value)
            for name, value in steps._asdict().items() if value is not None})

    @staticmethod
    def step_transitions(trajectory: Trajectory, terminal=False):
        """agents/n_step.py step_transitions, actions as float32 (the env's Box units)."""
        steps = step_transitions(trajectory, terminal)
        return steps._replace(actions=np.asarray(steps.actions, dtype=np.float32))

    def fragment_transitions(self, trajectory: Trajectory):
        return self.transitions(trajectory)

    def episode_steps(self, trajectory: Trajectory):
        return self.step_transitions(trajectory, terminal=True)
