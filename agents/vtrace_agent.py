"""vtrace_agent: whole fragments from rollout workers to an asynchronous learner (models/appo.py).

On a rollout worker it keeps the fragment's arrays as they are (time-major [T, E]) and exports
them for the learner: nothing is computed there, since V-trace needs the learner's current
weights. On the learner it holds the fragments of one update side by side as N env columns
(``adopt_data``), and each minibatch is a set of whole columns (``fetch_grads``): V-trace runs
backwards in time, so a column is never split. A recurrent model's columns carry the state
before their first step and their episode starts, so the learner replays the acting states.
"""
import numpy as np
import torch

from agents import register_agent
from agents.base import OnPolicyAgent
from core import spaces
from core.argtypes import unit_interval
from core.errors import ConfigError
from core.types import GradientResult, Trajectory
from models.appo import VTraceBatch


def columns(parts, key):
    """Concatenate the ``key`` arrays of ``parts`` along the env axis (axis 1, or 0 for the
    per-column arrays named in PER_COLUMN)."""
    axis = 0 if key in PER_COLUMN else 1
    return spaces.tree_map(lambda *leaves: np.concatenate(leaves, axis=axis),
                           *[p[key] for p in parts])


#: arrays with one row per column, not [T, E]
PER_COLUMN = ("last_observations", "last_starts", "first_states")
#: arrays of the truncated steps inside fragments (index rows (t, e), re-based per part)
TRUNCATED = ("truncated_index", "truncated_observations", "truncated_values")


@register_agent("vtrace_agent")
class VTraceAgent(OnPolicyAgent):
    """Fragments to the learner whole; V-trace minibatches of env columns there."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gamma", type=unit_interval, default=0.99,
                            help="discount factor (default: %(default)s)")
        parser.add_argument("--no_advantage_norm", dest="normalize_advantage",
                            action="store_false",
                            help="do not normalize the V-trace advantages (by default each "
                                 "minibatch's are, over its valid steps)")

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.rng = np.random.default_rng(seed)
        self.data = None      # a worker's last fragment (export_data), or the learner's union
        self.order = None

    # -- on a rollout worker ---------------------------------------------------------------------
    def send_trajectory(self, trajectory: Trajectory):
        if trajectory.log_probs is None:
            raise ConfigError(f"vtrace_agent needs the acting policy's log-probabilities in "
                              f"every fragment; model {type(self.model).__name__} does not "
                              f"report them (PPO's and APPO's models do).")
        if trajectory.step_report and ("next_sign" in trajectory.step_report
                                       or "acted" in trajectory.step_report):
            raise ConfigError("the env reports per-agent rewards or alternating players "
                              "(STEP_REPORT_KEY), which V-trace here does not read yet; train "
                              "this env with --model_name ppo.")
        steps, envs = trajectory.rewards.shape
        valid = (np.ones((steps, envs), bool) if trajectory.valid is None
                 else np.asarray(trajectory.valid, bool))
        data = {
            "observations": trajectory.observations,
            "actions": np.asarray(trajectory.actions),
            "log_probs": np.asarray(trajectory.log_probs, np.float32),
            "rewards": np.asarray(trajectory.rewards, np.float32),
            "terminated": np.asarray(trajectory.terminated, bool),
            "ended": np.logical_or(trajectory.terminated, trajectory.truncated),
            "valid": valid,
            "last_observations": trajectory.last_observations,
            "truncated_index": np.asarray(trajectory.truncated_index, np.int64).reshape(-1, 2),
            "truncated_observations": trajectory.truncated_observations,
        }
        memory = trajectory.memory
        if memory is not None:
            # the learner replays each column from its first state; it does not replay the
            # state after a truncated step, so those values come from the acting critic
            data["first_states"] = spaces.take(memory.states, 0)
            data["episode_starts"] = np.asarray(memory.episode_starts, bool)
            data["last_starts"] = np.asarray(memory.last_starts, bool)
            data["truncated_values"] = (
                np.asarray(self.model.predict_values(
                    trajectory.truncated_observations, state=memory.truncated_states,
                    episode_starts=memory.truncated_starts), np.float32)
                if len(data["truncated_index"]) else np.zeros(0, np.float32))
        self.data = data
        return {"sample_rows": int(valid.sum()), "sequences": envs}

    def export_data(self):
        return self.data

    # -- on the learner --------------------------------------------------------------------------
    def adopt_data(self, others):
        """The union of fragments (``export_data()`` of workers) as N columns; returns the
        number of valid samples."""
        others = list(others)
        union = {key: columns(others, key) for key in others[0]
                 if key not in TRUNCATED}
        offset, index, observations, values = 0, [], [], []
        for part in others:
            shifted = part["truncated_index"].copy()
            shifted[:, 1] += offset
            index.append(shifted)
            observations.append(part["truncated_observations"])
            if "truncated_values" in part:
                values.append(part["truncated_values"])
            offset += part["rewards"].shape[1]
        union["truncated_index"] = np.concatenate(index)
        union["truncated_observations"] = spaces.tree_map(
            lambda *leaves: np.concatenate(leaves), *observations)
        if values:
            union["truncated_values"] = np.concatenate(values)
        self.data = union
        self.order = None
        return int(union["valid"].sum())

    def split_data(self, parts, count):
        """The union of ``parts`` as ``count`` (or fewer: one column each at least) shares of
        whole env columns, in export_data's form: what --num_learners learner workers adopt."""
        self.adopt_data(parts)
        union, self.data = self.data, None
        width = union["rewards"].shape[1]
        return [self.columns_of(union, cols)
                for cols in np.array_split(np.arange(width), min(count, width))]

    @staticmethod
    def columns_of(data, cols):
        """Columns ``cols`` (consecutive, ascending) of a fragment's or a union's arrays."""
        share = {}
        for key, value in data.items():
            if key in TRUNCATED:
                continue
            share[key] = spaces.tree_map(
                (lambda a: a[cols]) if key in PER_COLUMN else (lambda a: a[:, cols]), value)
        index = data["truncated_index"]
        kept = np.flatnonzero((index[:, 1] >= cols[0]) & (index[:, 1] <= cols[-1]))
        share["truncated_index"] = index[kept] - np.array([0, cols[0]])
        for key in ("truncated_observations", "truncated_values"):
            if key in data:
                share[key] = spaces.tree_map(lambda a: a[kept], data[key])
        return share

    def absorb_data(self, others):
        return self.adopt_data([self.data, *others])

    def minibatch_columns(self, request):
        if request.minibatch == 0 or self.order is None:
            self.order = self.rng.permutation(self.data["rewards"].shape[1])
        return np.sort(np.array_split(self.order, request.num_minibatches)[request.minibatch])

    def batch(self, cols):
        """The VTraceBatch of columns ``cols`` on the model's device."""
        data = self.data
        device = getattr(self.model, "device", "cpu")

        def tensor(x, dtype=None):
            return torch.as_tensor(np.ascontiguousarray(x), device=device, dtype=dtype)

        def time_major(x):  # [T, E, ...] columns cols -> [T * n, ...]
            return spaces.tree_map(lambda a: tensor(a[:, cols].reshape(-1, *a.shape[2:])), x)

        observations = spaces.tree_map(
            lambda a, last: np.concatenate([a[:, cols], last[cols][None]]),
            data["observations"], data["last_observations"])
        observations = spaces.tree_map(lambda a: tensor(a.reshape(-1, *a.shape[2:])),
                                       observations)
        if not spaces.is_tree(observations) and observations.dtype != torch.uint8:
            observations = observations.float()
        position = np.full(data["rewards"].shape[1], -1)
        position[cols] = np.arange(len(cols))
        index = data["truncated_index"]
        kept = np.flatnonzero(position[index[:, 1]] >= 0) if len(index) else np.zeros(0, int)
        truncated_index = np.stack([index[kept, 0], position[index[kept, 1]]], axis=1) \
            if len(kept) else np.zeros((0, 2), np.int64)
        truncated_observations = spaces.tree_map(lambda a: tensor(a[kept]),
                                                 data["truncated_observations"])
        if not spaces.is_tree(truncated_observations) \
                and truncated_observations.dtype != torch.uint8:
            truncated_observations = truncated_observations.float()
        memory = {}
        if "first_states" in data:
            starts = np.concatenate([data["episode_starts"][:, cols],
                                     data["last_starts"][cols][None]])
            memory = {"states": spaces.tree_map(lambda a: tensor(a[cols]), data["first_states"]),
                      "episode_starts": tensor(starts),
                      "truncated_values": tensor(data["truncated_values"][kept])}
        return VTraceBatch(
            observations=observations, actions=time_major(data["actions"]),
            behaviour_log_probs=time_major(data["log_probs"]),
            rewards=tensor(data["rewards"][:, cols]),
            terminated=tensor(data["terminated"][:, cols]),
            ended=tensor(data["ended"][:, cols]),
            weights=tensor(data["valid"][:, cols], torch.float32),
            truncated_index=tensor(truncated_index, torch.int64),
            truncated_observations=truncated_observations, gamma=self.args.gamma,
            normalize_advantage=self.args.normalize_advantage, **memory)

    def fetch_grads(self, weights, request):
        self.sync_weights(weights, request.weights_version)
        cols = self.minibatch_columns(request)
        count = int(self.data["valid"][:, cols].sum()) if len(cols) else 0
        if count == 0:
            self.model.zero_grad(set_to_none=True)
            return GradientResult(self.model.collect_gradients(), 0,
                                  self.model.weights_version, {})
        gradients, stats = self.model.step(self.batch(cols), request.progress)
        return GradientResult(gradients, count, self.model.weights_version, stats)
