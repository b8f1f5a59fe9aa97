"""The agent contracts, one per kind of training loop.

An agent lives in a rollout worker (and in a learner) next to a model. What a loop calls on it
depends on the loop's kind:

- ``OnPolicyAgent`` (PPO's loop, core/algos/ppo_trainer.py): trajectories -> gradients.
  ``send_trajectory`` keeps a fragment and returns statistics the learner needs first (e.g.
  advantage sums); ``fetch_grads(weights, request)`` returns the gradient of the loss on the
  minibatch a ``core.types.GradientRequest`` names; ``export_data`` / ``absorb_data`` /
  ``adopt_data`` move a fragment's data between agents (--grad_workers).
- ``OffPolicyAgent`` (SAC's loop, core/algos/replay_trainer.py): transitions -> replay, batches ->
  gradients and priorities. ``send_trajectory`` turns a fragment into transitions that
  ``take_transitions`` hands to the replay buffer, ``priorities`` gives their initial replay
  priorities, ``fetch_grads(weights, batch, weights_version, progress)`` the gradients on a
  replay batch.

A registered agent subclasses one of the two, and the methods it overrides must accept the
arguments the loop passes (``check_agent_class``, run at registration): a mismatch is an error
when the plugin is loaded, not an exception deep inside a Ray worker.
"""
import inspect

from core.errors import ConfigError


class BaseAgent:
    """What every agent has: flags, the model, weight syncing and checkpoint state."""

    @staticmethod
    def add_args(parser):
        """Add this agent's flags to its argument group."""

    def __init__(self, args, model, seed=0):
        self.args = args
        self.model = model
        self.seed = seed

    def send_trajectory(self, trajectory):
        """Take a fragment of experience (core.types.Trajectory); return a dict of statistics
        for the trainer (core.types.RolloutStats.agent_stats)."""
        raise NotImplementedError

    def sync_weights(self, weights, version):
        """Load ``weights`` into the model unless this version is loaded already."""
        if weights is not None and version != getattr(self, "weights_version", None):
            self.model.set_weights(weights)
            self.weights_version = version

    def episodes_restarted(self):
        """Every env of the worker starts a new episode without ending the old one (a restore
        that could not continue them): drop what ties the next fragment to the last (n-step
        windows, unfinished episodes). Nothing by default."""

    def get_state(self):
        """What a checkpoint keeps of this agent between fragments: its RNG, if it has one
        (``self.rng``, a numpy Generator). Override to keep more."""
        rng = getattr(self, "rng", None)
        return {"rng": None if rng is None else rng.bit_generator.state}

    def set_state(self, state):
        rng = getattr(self, "rng", None)
        if rng is not None and state.get("rng") is not None:
            rng.bit_generator.state = state["rng"]


class OnPolicyAgent(BaseAgent):
    """Trajectories -> gradients (PPO's loop)."""

    def fetch_grads(self, weights, request):
        """Gradients (core.types.GradientResult) of the model's loss on this agent's data for
        ``weights`` and the minibatch that ``request`` (core.types.GradientRequest) names."""
        raise NotImplementedError

    def export_data(self):
        """This agent's data of the last fragment (after send_trajectory) as plain arrays, for
        another worker's agent to compute gradients on together with its own (PPO's gradient
        workers, --grad_workers); None when this agent cannot share its data (then every
        worker computes gradients on its own)."""
        return None

    def absorb_data(self, others):
        """Add other agents' ``export_data()`` to this agent's data of the round: its
        gradients are then those of the union."""
        raise NotImplementedError

    def adopt_data(self, others):
        """Make the union of other agents' ``export_data()`` this agent's data of the round,
        dropping any of its own: the learner's agent computes every minibatch gradient on it
        (PPO with --grad_workers 0). Optional: without it, --grad_workers 0 is refused."""
        raise NotImplementedError


class OffPolicyAgent(BaseAgent):
    """Transitions -> replay; replay batches -> gradients and priorities (the replay loop)."""
    #: the agent's transitions carry ``discounts`` (n-step returns: core.learning.replay_buffer
    #: Transitions), so the replay buffer keeps a column for them
    transition_discounts = False
    #: the agent can hand whole episodes (below): what hindsight relabelling needs (--her)
    hands_whole_episodes = False
    #: set True by the rollout worker before a fragment reaches the agent when the loop's buffer
    #: needs episodes (collect_to_buffer's ``whole_episodes``): ``take_transitions`` then hands
    #: only finished episodes, each one's steps consecutive and its last one marked in
    #: ``Transitions.episode_ends``, and keeps every env's unfinished one (agents/episodes.py)
    whole_episodes = False

    #: the agent hands the replay buffer sequences with the recurrent state they began from
    #: (core/learning/sequence_replay.py), not single transitions: a recurrent model is then
    #: welcome (agents/r2d2_agent.py)
    learns_from_sequences = False

    @classmethod
    def replay_layout(cls, config):
        """What the replay buffer's rows are, as keyword arguments of its constructor: None
        for transitions; ``{"sequence_length": S}`` for sequences of S steps (an agent that
        ``learns_from_sequences``). ``config``: the agent's flags."""
        return None

    @classmethod
    def env_steps_per_row(cls, config):
        """The env steps one replay row stands for in the loop's count of what the buffer
        holds (``take_transitions``' stats report rows times this as "transitions"; a restored
        buffer's rows are counted alike): 1 for transitions, the new steps of each sequence
        for an agent that stores sequences."""
        return 1

    @classmethod
    def her_problem(cls, config):
        """Why this agent's transitions cannot be relabelled with hindsight goals (--her) under
        ``config`` (its flags), as a sentence for the error; None: they can."""
        return None

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        if getattr(model, "recurrent", False) and not self.learns_from_sequences:
            raise ConfigError(
                f"model {type(model).__name__} is recurrent (it acts from a state it carries), "
                f"but an off-policy agent ({type(self).__name__}) stores single transitions in "
                f"replay, with no state to learn from. Train recurrent models with PPO's loop "
                f"(--model_name ppo --recurrent lstm|gru), or a recurrent Q network from "
                f"replayed sequences (--model_name r2d2).")

    def take_transitions(self):
        """The transitions (core.learning.replay_buffer.Transitions) of the fragments sent since the
        last call, or None; cleared."""
        raise NotImplementedError

    def priorities(self, transitions):
        """Initial replay priorities of ``transitions`` (numpy [N], > 0), with the weights
        loaded now (prioritized replay)."""
        raise NotImplementedError

    def fetch_grads(self, weights, batch, weights_version=None, progress=0.0):
        """GradientResult of the loss on a replay batch (core.learning.replay_buffer.ReplayBatch), for
        ``weights`` (None: the loaded ones) of version ``weights_version``; ``progress`` is the
        run's fraction done (learning-rate schedules). Its stats may hold "td_errors" (numpy
        [B]) for the priority update."""
        raise NotImplementedError


AGENT_KINDS = (OnPolicyAgent, OffPolicyAgent)


def check_agent_class(cls):
    """An agent subclasses OnPolicyAgent or OffPolicyAgent, and every contract method it
    overrides takes the arguments its loop passes (positionally, as the loops call them)."""
    kind = next((k for k in AGENT_KINDS if issubclass(cls, k)), None)
    if kind is None:
        raise ConfigError(
            f"cannot register agent {cls.__name__}: it must subclass agents.base.OnPolicyAgent "
            f"(trajectories -> gradients: PPO's loop) or agents.base.OffPolicyAgent "
            f"(transitions -> replay, batches -> gradients: SAC's loop), not only BaseAgent.")
    for name, contract in inspect.getmembers(kind, inspect.isfunction):
        if name.startswith("_") or getattr(cls, name) is contract:
            continue
        # the contract's required parameters, self included (a staticmethod has none)
        wanted = [p for p in inspect.signature(contract).parameters.values()
                  if p.default is inspect.Parameter.empty]
        try:
            inspect.signature(getattr(cls, name)).bind(*[None] * len(wanted))
        except TypeError:
            raise ConfigError(
                f"cannot register agent {cls.__name__}: its {name}{inspect.signature(getattr(cls, name))} "
                f"does not take the arguments {kind.__name__}.{name}{inspect.signature(contract)} "
                f"is called with.") from None
