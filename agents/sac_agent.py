"""sac_agent: turns fragments into replay transitions, and replay batches into SAC gradients.

On an explorer, ``send_trajectory`` flattens each fragment into a block of transitions and keeps
it in ``self.pending`` until the trainer takes it (``take_transitions``) for the replay buffer;
asked for whole episodes (hindsight relabelling, --her), it keeps each env's unfinished episode
across fragments and hands on only finished ones (agents/episodes.py), checkpointed with it.
On a learner worker, ``fetch_grads(weights, batch, weights_version)`` loads the weights if they
are new and returns the model's gradients on a sampled core.learning.replay_buffer.ReplayBatch.
"""
import numpy as np

from agents import register_agent
from agents.base import OffPolicyAgent
from agents.episodes import Episodes
from agents.n_step import step_transitions
from core import spaces
from core.types import GradientResult, Trajectory


@register_agent("sac_agent")
class SACAgent(OffPolicyAgent):
    """Replay transitions from fragments (bootstrapping at truncation); SAC gradients on batches."""
    hands_whole_episodes = True

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.pending = None         # the Transitions of the last fragment, until taken
        self.episodes = Episodes()  # with whole_episodes: each env's unfinished episode
        self.weights_version = None

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

    def send_trajectory(self, trajectory: Trajectory):
        """Keep the fragment's transitions in ``self.pending`` (replacing any not taken); with
        ``whole_episodes``, add its steps to the episodes being assembled instead."""
        if self.whole_episodes:
            ends = (np.asarray(trajectory.terminated, dtype=bool)
                    | np.asarray(trajectory.truncated, dtype=bool))
            ready = self.episodes.add(self.step_transitions(trajectory, terminal=True), ends,
                                      trajectory.valid)
            return {"transitions": int(ready)}
        self.pending = self.transitions(trajectory)
        return {"transitions": int(len(self.pending.rewards))}

    def take_transitions(self):
        """The pending Transitions (None if there are none), cleared; with ``whole_episodes``,
        the episodes finished since the last call (agents/episodes.py)."""
        if self.whole_episodes:
            return self.episodes.take()
        pending, self.pending = self.pending, None
        return pending

    def episodes_restarted(self):
        self.episodes.reset()

    def get_state(self):
        return {**super().get_state(), "episodes": self.episodes.get_state()}

    def set_state(self, state):
        super().set_state(state)
        self.episodes.set_state(state.get("episodes"))

    def priorities(self, transitions):
        """Initial replay priorities |TD| for a block, with the weights loaded now."""
        return self.model.td_errors(transitions)

    def fetch_grads(self, weights, batch, weights_version=None, progress=0.0):
        """GradientResult of the SAC losses on ``batch`` (a core.learning.replay_buffer.ReplayBatch).

        ``weights`` (None: keep the loaded ones) are loaded unless ``weights_version`` is the
        version loaded already; giving weights without their version is an error. The result
        carries the version the gradients were computed with.
        """
        if weights is not None and weights_version is None:
            raise ValueError("fetch_grads: give the weights_version of these weights")
        self.sync_weights(weights, weights_version)
        gradients, stats = self.model.step(batch, progress)
        num_samples = int(len(np.asarray(getattr(batch, "transitions", batch).rewards)))
        # the version of the weights the model holds (core/types.py WEIGHTS_VERSION_KEY)
        return GradientResult(gradients, num_samples, self.model.weights_version, stats)
