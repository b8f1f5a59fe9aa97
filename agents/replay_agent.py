"""ReplayAgent: what an off-policy agent on the replay loop does besides its own transitions,
shared by sac_agent and dqn_agent (a template: subclass it and say how a fragment becomes
transitions).

On an explorer (a rollout worker) ``send_trajectory`` turns each fragment into a block of
transitions (``fragment_transitions``) and keeps it until the loop takes it
(``take_transitions``) for the replay buffer, with initial priorities from ``priorities``
(|TD error| under the weights loaded now, as Ape-X's actors); asked for whole episodes
(``whole_episodes``: hindsight relabelling, --her) it adds each fragment's one-step
transitions (``episode_steps``) to the episodes being assembled (agents/episodes.py) and hands
on only finished ones. On a learner ``fetch_grads`` loads the weights if they are new and
returns the model's gradients on a replay batch. Checkpoints keep the unfinished episodes.
"""
import numpy as np

from agents.base import OffPolicyAgent
from agents.episodes import Episodes
from core.types import GradientResult, Trajectory


class ReplayAgent(OffPolicyAgent):
    hands_whole_episodes = True

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.pending = None         # the Transitions of the last fragment, until taken
        self.episodes = Episodes()  # with whole_episodes: each env's unfinished episode
        self.weights_version = None

    # -- what a subclass says ----------------------------------------------------------------
    def fragment_transitions(self, trajectory: Trajectory):
        """The fragment's transitions, one block (core.learning.replay_buffer.Transitions)."""
        raise NotImplementedError

    def episode_steps(self, trajectory: Trajectory):
        """The one-step transition of every step of the fragment, [T, E] arrays (agents/n_step.py
        step_transitions with ``terminal=True``), in the form this agent's buffer stores."""
        raise NotImplementedError

    # -- the loop's calls ----------------------------------------------------------------------
    def send_trajectory(self, trajectory: Trajectory):
        """Keep the fragment's transitions (replacing any not taken); with ``whole_episodes``,
        add its steps to the episodes being assembled instead."""
        if self.whole_episodes:
            ends = (np.asarray(trajectory.terminated, dtype=bool)
                    | np.asarray(trajectory.truncated, dtype=bool))
            ready = self.episodes.add(self.episode_steps(trajectory), ends, trajectory.valid)
            return {"transitions": int(ready)}
        self.pending = self.fragment_transitions(trajectory)
        return {"transitions": int(len(self.pending.rewards))}

    def take_transitions(self):
        """The pending Transitions (None if there are none), cleared; with ``whole_episodes``,
        the episodes finished since the last call."""
        if self.whole_episodes:
            return self.episodes.take()
        pending, self.pending = self.pending, None
        return pending

    def priorities(self, transitions):
        """Initial replay priorities |TD| for a block, with the weights loaded now."""
        return self.model.td_errors(transitions)

    def fetch_grads(self, weights, batch, weights_version=None, progress=0.0):
        """GradientResult of the model's loss on ``batch`` (a ReplayBatch). ``weights`` (None:
        keep the loaded ones) are loaded unless ``weights_version`` is the version loaded
        already; giving weights without their version is an error. The result carries the
        version the gradients were computed with (core/types.py WEIGHTS_VERSION_KEY)."""
        if weights is not None and weights_version is None:
            raise ValueError("fetch_grads: give the weights_version of these weights")
        self.sync_weights(weights, weights_version)
        gradients, stats = self.model.step(batch, progress)
        num_samples = int(len(np.asarray(getattr(batch, "transitions", batch).rewards)))
        return GradientResult(gradients, num_samples, self.model.weights_version, stats)

    # -- checkpoints ---------------------------------------------------------------------------
    def episodes_restarted(self):
        self.episodes.reset()

    def get_state(self):
        return {**super().get_state(), "episodes": self.episodes.get_state()}

    def set_state(self, state):
        super().set_state(state)
        self.episodes.set_state(state.get("episodes"))
