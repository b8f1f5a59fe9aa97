"""default_agent: GAE(lambda) advantages and PPO minibatch gradients for one worker's data.

With a recurrent model (models/base.py ``recurrent``) the data stay in sequences: each env's
column of the fragment, cut into chunks of ``--bptt_len`` steps (core/learning/sequences.py),
with the state each chunk began from and the episode starts inside it; a minibatch is a set of
sequences (as CleanRL's ppo_atari_lstm), its loss a mean over their valid steps, and gradients
are weighted by those steps, so averaging workers' gradients is still the gradient of the
union. Bootstrapping values come from the state the acting policy was in (FragmentMemory)."""
import numpy as np
import torch

from agents import register_agent
from agents.base import OnPolicyAgent
from core import spaces
from core.learning.sequences import chunk_starts, time_major, to_sequences
from core.errors import ConfigError
from core.types import STEP_REPORT_KEY, GradientResult, Trajectory
from models.ppo import PPOBatch
from core.argtypes import non_negative_int, unit_interval


def compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam,
                next_sign=None):
    """Generalized advantage estimation (Schulman et al. 2015, arXiv:1506.02438), time-major.

    ``next_values[t]`` is V of the state after step t within the same episode: the next step's
    value, the value of the final observation when step t was truncated, or anything when it
    terminated (a terminal state is worth 0, so it is masked out). The recursion stops at every
    episode end, terminated or truncated. ``next_sign[t]`` (default +1): -1 where the state
    after step t is the opponent's to move in a two-player zero-sum game (its value, from that
    player's side, is the negative of this step's mover's; the advantage flowing back from it
    too: negamax). Returns (advantages, returns).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    not_terminal = 1.0 - np.asarray(terminated, dtype=np.float64)
    episode_goes_on = 1.0 - np.logical_or(terminated, truncated).astype(np.float64)
    if next_sign is not None:
        sign = np.asarray(next_sign, dtype=np.float64)
        not_terminal, episode_goes_on = not_terminal * sign, episode_goes_on * sign
    deltas = rewards + gamma * np.asarray(next_values) * not_terminal - np.asarray(values)
    advantages = np.zeros_like(deltas)
    running = np.zeros(deltas.shape[1:])
    for t in reversed(range(deltas.shape[0])):
        running = deltas[t] + gamma * lam * episode_goes_on[t] * running
        advantages[t] = running
    returns = advantages + values
    return advantages.astype(np.float32), returns.astype(np.float32)


def per_agent_terms(trajectory):
    """(rewards, terminated, episode goes on, weights), each [T, E, K], for a model whose values
    are per agent ([T, E, K]: models/ma_ppo.py --agent_rewards): agent k's own reward; its
    value is cut (a terminal state, worth 0) where the team terminated or agent k left; its
    recursion stops there and at the team's other episode ends; its samples weigh 1 only
    where it acted (an agent gone, or not yet come, has no sample) at a valid step."""
    found = trajectory.step_report
    if found is None or not {"rewards", "acted", "terminated"} <= set(found):
        raise ConfigError(
            "the model values each agent on its own (models/ma_ppo.py --agent_rewards), but "
            "the env does not report each agent's reward: its infos need "
            f"{STEP_REPORT_KEY!r} with rewards, acted and terminated per agent "
            "(envs/pettingzoo_env.py gives them). Drop --agent_rewards to learn from the "
            "team's reward.")
    rewards = found["rewards"]
    team_terminated = np.asarray(trajectory.terminated, bool)[..., None]
    team_ended = np.logical_or(trajectory.terminated, trajectory.truncated)[..., None]
    left = found["terminated"] > 0
    terminated = team_terminated | left
    goes_on = ~(team_ended | left)
    weights = found["acted"] > 0
    if trajectory.valid is not None:
        weights = weights & np.asarray(trajectory.valid, bool)[..., None]
    return rewards, terminated, goes_on, weights


def as_model_input(observations):
    """uint8 pixels stay uint8 (the model's encoder scales them), and so do the indices and
    masks of a structured observation (core/spaces.py); float arrays become float32."""
    if spaces.is_tree(observations):
        return spaces.tree_map(lambda x: x.float() if x.is_floating_point() else x,
                               observations)
    return observations if observations.dtype == torch.uint8 else observations.float()


def cat(parts):
    """Concatenate tensors, or trees of them leaf by leaf, along the first dimension."""
    if spaces.is_tree(parts[0]):
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return torch.cat(parts)


def round_sums(advantages, returns, counted):
    """What a learner merges the round's moments from: the advantages' (normalization) and
    the returns' (--value_norm), over the entries ``counted`` (a bool mask of their shape)."""
    kept = advantages[counted].astype(np.float64)
    kept_returns = returns[counted].astype(np.float64)
    return {"advantage_sum": float(kept.sum()), "advantage_sq_sum": float((kept ** 2).sum()),
            "advantage_count": int(counted.sum()), "return_sum": float(kept_returns.sum()),
            "return_sq_sum": float((kept_returns ** 2).sum())}


def ppo_arrays(trajectory, advantages, returns, convert):
    """The PPO batch's arrays of a fragment, each through ``convert`` (flattened steps, or
    sequences)."""
    return {
        "observations": as_model_input(convert(trajectory.observations)),
        "actions": convert(trajectory.actions),
        "old_log_probs": convert(trajectory.log_probs).float(),
        "advantages": convert(advantages),
        "returns": convert(returns),
        "old_values": convert(trajectory.values).float(),
    }


@register_agent("default_agent")
class DefaultAgent(OnPolicyAgent):
    """GAE(lambda) with bootstrapping at truncation; minibatch gradients for the learner."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gamma", type=unit_interval, default=0.98,
                            help="discount factor (default: %(default)s)")
        parser.add_argument("--gae_lambda", type=unit_interval, default=0.8,
                            help="GAE lambda (default: %(default)s)")
        parser.add_argument("--no_advantage_norm", dest="normalize_advantage",
                            action="store_false",
                            help="do not normalize advantages (by default they are normalized, "
                                 "as --advantage_norm_scope says)")
        parser.add_argument("--advantage_norm_scope", choices=["round", "minibatch"],
                            default="round",
                            help="normalize advantages with the mean and std of the whole round "
                                 "(all workers: the workers' averaged gradients then equal one "
                                 "big batch's), or of each minibatch as SB3 and CleanRL do (each "
                                 "gradient worker its own share of it: exact with one, "
                                 "--grad_workers 0 or --num_workers 0); the Atari preset "
                                 "uses the minibatch scope (BENCHMARKS.md, Atari) "
                                 "(default: %(default)s)")
        parser.add_argument("--bptt_len", type=non_negative_int, default=0,
                            help="recurrent models: learn on sequences of this many steps "
                                 "(truncated backpropagation through time), each from the "
                                 "state the acting policy had at its first step; 0: each "
                                 "env's whole fragment, --rollout_steps (default: %(default)s)")

    def __init__(self, args, model, seed=0):
        super().__init__(args, model, seed)
        self.rng = np.random.default_rng(seed)
        self.data = None
        self.order = None
        self.weights_version = None

    def send_trajectory(self, trajectory: Trajectory):
        memory = trajectory.memory
        # a recurrent model values an observation from the state the acting policy was in
        last = ({} if memory is None else
                {"state": memory.last_state, "episode_starts": memory.last_starts})
        cut = ({} if memory is None else
               {"state": memory.truncated_states, "episode_starts": memory.truncated_starts})
        next_values = np.empty_like(trajectory.values)
        next_values[:-1] = trajectory.values[1:]
        next_values[-1] = self.model.predict_values(trajectory.last_observations, **last)
        if len(trajectory.truncated_index):
            t, e = trajectory.truncated_index.T
            next_values[t, e] = self.model.predict_values(trajectory.truncated_observations,
                                                          **cut)
        if trajectory.values.ndim == 3:  # a value per agent: each learns from its own reward
            return self.keep_per_agent(trajectory, next_values)
        advantages, returns = self.advantages_and_returns(trajectory, next_values)
        if memory is not None:
            return self.keep_sequences(trajectory, advantages, returns)
        n = trajectory.num_steps
        # Steps whose env raised are cuts kept only to make the arrays rectangular: GAE runs
        # over them (they end their episode, so nothing flows across), then they are dropped.
        valid = (np.ones(n, dtype=bool) if trajectory.valid is None
                 else np.asarray(trajectory.valid, dtype=bool).reshape(n))
        keep = torch.as_tensor(valid)
        device = getattr(self.model, "device", "cpu")  # a GPU share of the worker's, if any

        def flat(x):
            if spaces.is_tree(x):
                return {k: flat(v) for k, v in x.items()}
            return torch.as_tensor(np.asarray(x).reshape(n, *np.asarray(x).shape[2:]))[keep].to(
                device)

        self.data = {**ppo_arrays(trajectory, advantages, returns, flat),
                     **{k: flat(v) for k, v in self.extra_arrays().items()}}
        return round_sums(advantages.reshape(n), returns.reshape(n), valid)

    def advantages_and_returns(self, trajectory, next_values):
        """(advantages, value targets), each [T, E], of a fragment whose model values each step
        once: GAE(lambda) on its rewards. A subclass adds terms (agents/rnd_agent.py: an
        intrinsic reward's advantages, with ``extra_arrays`` for its value head)."""
        report = trajectory.step_report or {}
        return compute_gae(trajectory.rewards, trajectory.values, next_values,
                           trajectory.terminated, trajectory.truncated, self.args.gamma,
                           self.args.gae_lambda, report.get("next_sign"))

    def extra_arrays(self):
        """{name: [T, E, ...] array} of the last fragment kept beside PPO's arrays (its steps
        flattened and cut as theirs; a model without memory), for ``model_batch``: none
        here."""
        return {}

    def model_batch(self, batch, idx):
        """What the model's ``step`` gets for the minibatch ``idx`` of this agent's data: the
        PPOBatch itself here."""
        return batch

    def keep_per_agent(self, trajectory, next_values):
        """Per-agent GAE (``per_agent_terms``): each agent's advantages from its own rewards
        and values; the samples are (step, agent) pairs, weighted by whether the agent acted
        (PPOBatch.weights [B, K])."""
        if trajectory.memory is not None:
            raise ConfigError("values per agent (--agent_rewards) with a recurrent model: not "
                              "supported; drop --recurrent.")
        rewards, terminated, goes_on, weights = per_agent_terms(trajectory)
        advantages, returns = compute_gae(rewards, trajectory.values, next_values, terminated,
                                          ~goes_on, self.args.gamma, self.args.gae_lambda)
        n = trajectory.rewards.size
        device = getattr(self.model, "device", "cpu")

        def flat(x):
            if spaces.is_tree(x):
                return {k: flat(v) for k, v in x.items()}
            x = np.asarray(x)
            return torch.as_tensor(x.reshape(n, *x.shape[2:])).to(device)

        self.data = {**ppo_arrays(trajectory, advantages, returns, flat),
                     "weights": flat(weights.astype(np.float32))}
        self.order = None
        # minibatches split steps (sample_rows), each with all its agents
        return {**round_sums(advantages, returns, weights), "sample_rows": n}

    def keep_sequences(self, trajectory, advantages, returns):
        """A recurrent model's data: sequences batch-first [S, L, ...] (module docstring); the
        steps of an env failure's cut and the padding weigh 0."""
        memory = trajectory.memory
        length = self.args.bptt_len or trajectory.rewards.shape[0]
        valid = (np.ones(trajectory.rewards.shape, dtype=bool) if trajectory.valid is None
                 else np.asarray(trajectory.valid, dtype=bool))
        device = getattr(self.model, "device", "cpu")

        def seq(x):
            return spaces.tree_map(lambda a: torch.as_tensor(a).to(device),
                                   to_sequences(x, length))

        self.data = {
            **ppo_arrays(trajectory, advantages, returns, seq),
            "weights": seq(valid.astype(np.float32)),
            "episode_starts": seq(memory.episode_starts),
            "states": spaces.tree_map(lambda a: torch.as_tensor(a).to(device),
                                      chunk_starts(memory.states, length)),
        }
        self.order = None
        return {**round_sums(advantages, returns, valid), "sequences": len(self.data["returns"])}

    def export_data(self):
        return {k: spaces.tree_map(lambda t: t.cpu().numpy(), v) for k, v in self.data.items()}

    def absorb_data(self, others):
        """The union of this agent's data and ``others`` (their advantages were computed by
        their own workers with the same gamma and lambda; normalization uses the round's
        moments over all workers, as before)."""
        return self.take_union([self.data, *others])

    def adopt_data(self, others):
        """The union of ``others`` as this agent's data of the round, none of its own (the
        learner's agent, --grad_workers 0)."""
        return self.take_union(others)

    def take_union(self, parts):
        """Concatenate ``parts`` (this agent's tensors or exported arrays) as this round's data,
        on the model's device; returns the sample count."""
        device = getattr(self.model, "device", "cpu")

        def tensor(x):  # arrays from Ray's object store are read-only: copy them
            return x.to(device) if isinstance(x, torch.Tensor) else torch.tensor(x, device=device)

        self.data = {k: cat([spaces.tree_map(tensor, p[k]) for p in parts]) for k in parts[0]}
        self.order = None
        return len(self.data["returns"])

    def minibatch_indices(self, request):
        if request.minibatch == 0 or self.order is None:
            self.order = self.rng.permutation(len(self.data["returns"]))
        return np.array_split(self.order, request.num_minibatches)[request.minibatch]

    def fetch_grads(self, weights, request):
        self.sync_weights(weights, request.weights_version)
        idx = torch.as_tensor(self.minibatch_indices(request),
                              device=self.data["returns"].device)
        if len(idx) == 0:  # fewer valid samples than minibatches: contribute nothing, not NaN
            self.model.zero_grad(set_to_none=True)
            return GradientResult(self.model.collect_gradients(), 0, self.model.weights_version, {})
        if "states" in self.data:
            return self.sequence_grads(idx, request)
        if "weights" in self.data:
            return self.per_agent_grads(idx, request)
        advantages = self.normalized(self.data["advantages"][idx], request)
        batch = PPOBatch(spaces.take(self.data["observations"], idx), self.data["actions"][idx],
                         self.data["old_log_probs"][idx], advantages,
                         self.data["returns"][idx], self.data["old_values"][idx])
        gradients, stats = self.model.step(self.model_batch(batch, idx), request.progress)
        # the version of the weights the model holds (not the request's: measured, not echoed)
        return GradientResult(gradients, len(idx), self.model.weights_version, stats)

    def per_agent_grads(self, idx, request):
        """The gradient on the steps ``idx`` with values per agent: the loss a mean over the
        (step, agent) pairs whose agent acted; counted by those pairs."""
        data = self.data
        weights = data["weights"][idx]
        count = int(weights.sum().item())
        if count == 0:  # no agent acted at these steps: contribute nothing
            self.model.zero_grad(set_to_none=True)
            return GradientResult(self.model.collect_gradients(), 0,
                                  self.model.weights_version, {})
        batch = PPOBatch(spaces.take(data["observations"], idx), data["actions"][idx],
                         data["old_log_probs"][idx],
                         self.normalized(data["advantages"][idx], request, weights),
                         data["returns"][idx], data["old_values"][idx], weights=weights)
        gradients, stats = self.model.step(batch, request.progress)
        return GradientResult(gradients, count, self.model.weights_version, stats)

    def normalized(self, advantages, request, weights=None):
        """Advantages normalized as --advantage_norm_scope says (the minibatch's moments over
        the steps that count, ``weights`` > 0, when given)."""
        if not self.args.normalize_advantage:
            return advantages
        if self.args.advantage_norm_scope == "round":
            return (advantages - request.advantage_mean) / (request.advantage_std + 1e-8)
        counted = advantages if weights is None else advantages[weights > 0]
        if len(counted) > 1:  # (one sample has no spread: left as it is, as SB3 does)
            return (advantages - counted.mean()) / (counted.std() + 1e-8)
        return advantages

    def sequence_grads(self, idx, request):
        """The gradient on the sequences ``idx`` (a recurrent model), time-major for the
        model: PPOBatch rows t * N + n, with the sequences' first states and starts."""
        data = self.data
        weights = time_major(data["weights"][idx])
        count = int(weights.sum().item())
        length = data["weights"].shape[1]
        batch = PPOBatch(
            spaces.tree_map(time_major, spaces.take(data["observations"], idx)),
            time_major(data["actions"][idx]), time_major(data["old_log_probs"][idx]),
            self.normalized(time_major(data["advantages"][idx]), request, weights),
            time_major(data["returns"][idx]), time_major(data["old_values"][idx]),
            weights=weights, states=spaces.take(data["states"], idx),
            episode_starts=data["episode_starts"][idx].transpose(0, 1),
            sequence_shape=(length, len(idx)))
        if count == 0:  # only padding and cut steps: contribute nothing
            self.model.zero_grad(set_to_none=True)
            return GradientResult(self.model.collect_gradients(), 0,
                                  self.model.weights_version, {})
        gradients, stats = self.model.step(batch, request.progress)
        return GradientResult(gradients, count, self.model.weights_version, stats)
