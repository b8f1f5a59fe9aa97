"""The agent contract: an agent turns a worker's trajectories into gradients."""


class BaseAgent:
    @staticmethod
    def add_args(parser):
        """Add this agent's flags to its argument group."""

    def __init__(self, args, model, seed=0):
        self.args = args
        self.model = model
        self.seed = seed

    def send_trajectory(self, trajectory):
        """Take a fragment of experience (core.types.Trajectory); return statistics the
        learner needs before asking for gradients (e.g. advantage sums)."""
        raise NotImplementedError

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

    def sync_weights(self, weights, version):
        """Load ``weights`` into the model unless this version is loaded already."""
        if weights is not None and version != getattr(self, "weights_version", None):
            self.model.set_weights(weights)
            self.weights_version = version

    def get_state(self):
        """What a checkpoint keeps of this agent between fragments: its RNG, if it has one
        (``self.rng``, a numpy Generator). Override to keep more."""
        rng = getattr(self, "rng", None)
        return {"rng": None if rng is None else rng.bit_generator.state}

    def set_state(self, state):
        rng = getattr(self, "rng", None)
        if rng is not None and state.get("rng") is not None:
            rng.bit_generator.state = state["rng"]
