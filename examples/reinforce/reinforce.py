"""A training loop as a plugin: REINFORCE (Williams 1992) with a learned baseline, in one file.

    python main.py --user_dir examples/reinforce --model_name reinforce_mlp --gym_id CartPole-v1

Three registrations: a model that names its loop (``trainer = "reinforce"``), the agent that
turns a fragment into the policy-gradient estimate, and the loop itself, a subclass of
core.algos.trainer.Trainer that fills in the skeleton's steps (collect, learn, metrics_row);
the session around it evaluates, records, checkpoints and stops. The loop uses ddrl's own pieces, so it gets what the built-in loops get:
a rollout worker (core/sampling/rollout.py) in a worker group that replaces it if it dies, the test
worker's evaluation schedule, metrics.csv / TensorBoard / the learning-curve plot, checkpoints
and --restore. It runs its one worker in this process (``--num_workers`` is ignored).
"""
import numpy as np
import torch

from agents import register_agent
from agents.base import OnPolicyAgent
from agents.default_agent import as_model_input, compute_gae
from core.learning.learner import Learner
from core.sampling.rollout import make_rollout_worker
from core.algos.trainer import Trainer
from core.algos.trainers import register_trainer
from core.types import GradientRequest, GradientResult
from core.sampling.worker_group import MISSING, WorkerGroup
from models import register_model
from models.ppo import PPOModel
from core.argtypes import positive_int, unit_interval


@register_model("reinforce_mlp")
class ReinforceModel(PPOModel):
    """PPO's actor-critic networks, trained by the REINFORCE loop (the critic is the baseline)."""
    trainer = "reinforce"
    default_agent = "reinforce_agent"

    def reinforce_step(self, observations, actions, returns):
        """Gradients of -log pi(a|s) * (G - V(s)) + (G - V(s))^2, averaged over the samples."""
        features = self.features(observations)
        dist = self.distribution(features)
        values = self.values(features)
        advantages = (returns - values).detach()
        policy_loss = -(self.log_prob(dist, actions) * advantages).mean()
        value_loss = ((returns - values) ** 2).mean()
        self.zero_grad(set_to_none=True)
        (policy_loss + self.args.vf_coef * value_loss).backward()
        return self.collect_gradients(), {"policy_loss": policy_loss.item(),
                                          "value_loss": value_loss.item()}


@register_agent("reinforce_agent")
class ReinforceAgent(OnPolicyAgent):
    """Discounted returns-to-go of each fragment (bootstrapped from V where a fragment or a
    time limit cuts an episode); one gradient on the whole fragment."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--gamma", type=unit_interval, default=0.99,
                            help="discount factor of the returns (default: %(default)s)")

    def send_trajectory(self, trajectory):
        zeros = np.zeros_like(trajectory.values)
        next_values = zeros.copy()
        next_values[-1] = self.model.predict_values(trajectory.last_observations)
        if len(trajectory.truncated_index):  # a time limit is not a terminal state
            t, e = trajectory.truncated_index.T
            next_values[t, e] = self.model.predict_values(trajectory.truncated_observations)
        # GAE with lambda 1 and no values is the discounted return-to-go
        _, returns = compute_gae(trajectory.rewards, zeros, next_values, trajectory.terminated,
                                 trajectory.truncated, self.args.gamma, 1.0)
        n = trajectory.num_steps

        def flat(x):  # [T, E, ...] -> [T * E, ...]
            x = np.asarray(x)
            return torch.as_tensor(x.reshape(n, *x.shape[2:]))

        self.data = (as_model_input(flat(trajectory.observations)), flat(trajectory.actions),
                     flat(returns).float())
        return {"samples": n}

    def fetch_grads(self, weights, request):
        self.sync_weights(weights, request.weights_version)
        gradients, stats = self.model.reinforce_step(*self.data)
        return GradientResult(gradients, len(self.data[2]), request.weights_version, stats)


@register_trainer("reinforce")
class ReinforceTrainer(Trainer):
    """One in-process worker: collect a fragment, one gradient step on it, repeat."""
    metric_columns = ["iteration", "env_steps", "wall_time_s", "steps_per_s", "updates",
                      "train_return", "episodes", "eval_return", "eval_return_std",
                      "policy_loss", "value_loss", "workers", "worker_restarts", "env_errors",
                      "skipped_updates", "recoveries"]
    agent_kind = OnPolicyAgent

    @staticmethod
    def add_args(parser):
        parser.add_argument("--rollout_steps", type=positive_int, default=32,
                            help="steps per env in each fragment (default: %(default)s)")

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        super().__init__(args, spec, plugins, spaces, run, faults, ray_starter)
        torch.manual_seed(args.seed)
        self.model = plugins.model_cls(spec.model, *spaces)
        self.learner = Learner(self.model)
        self.group = WorkerGroup("rollout worker", self.make_worker, faults,
                                 lambda: run.env_steps)
        self.group.add(0, local=True)

    def make_worker(self, slot, generation, local, node=None):
        return make_rollout_worker(self.spec, slot, generation, True, 1, None)

    def worker_groups(self):
        return [self.group]

    def collect(self):
        """One fragment from the worker, acted with the current weights."""
        worker = self.group.members[0]
        stats = self.group.take(self.group.submit(
            worker, "collect", *self.weights_and_version(), self.args.rollout_steps,
            self.obs_statistics()))
        if stats is not MISSING:
            self.run.env_steps += stats.env_steps
        return stats

    def learn(self, stats):
        """One gradient step on the fragment (its agent computed the returns)."""
        if stats is MISSING:
            return {}
        weights, version = self.weights_and_version()
        result = self.group.take(self.group.submit(
            self.group.members[0], "fetch_grads", weights,
            GradientRequest(0, 0, 1, 0.0, 1.0, 0.0, version)))
        if result is MISSING or self.learner.apply(result.gradients) is None:
            self.faults.update_skipped("lost or not finite", self.run.env_steps)
            return {}
        return result.stats

    def metrics_row(self, stats, learned):
        returns = [] if stats is MISSING else stats.episode_returns
        return {"iteration": self.iteration, "updates": self.learner.version,
                "train_return": float(np.mean(returns)) if returns else None,
                "episodes": len(returns), "workers": 1, **self.faults.counts, **learned}

    def weights_and_version(self):
        return self.learner.weights_for_workers(), self.learner.version

    def checkpoint_state(self):
        return self.learner.state()

    def restore(self, weights, optimizer_state, updates):
        self.learner.load_state(weights, optimizer_state, updates)
