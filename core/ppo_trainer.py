"""Distributed gradient-collecting PPO.

Every iteration: each rollout worker collects a fragment with the current weights and its agent
computes advantages; then for K epochs x M minibatches, every worker returns the gradient of the
loss on its share of the minibatch, the learner averages them (weighted by sample count) and
applies one optimizer step, and the new weights go back to the workers as one object reference.
This is synchronous data-parallel PPO: with equal seeds and data it takes the same steps as one
process on the union of the workers' data.
"""
import time

import numpy as np
import ray
import torch

from core.evaluator import Evaluator
from core.normalizer import NormalizedTrainer
from core.learner import Learner, average_gradients
from core.placement import Placement
from core.rollout import RolloutWorker, restore_workers
from core.types import GradientRequest

METRIC_COLUMNS = [
    "iteration", "env_steps", "wall_time_s", "steps_per_s", "updates", "train_return",
    "train_length", "episodes", "eval_return", "eval_return_std", "policy_loss", "value_loss",
    "entropy", "approx_kl", "clip_fraction", "ratio_mean", "grad_norm", "learning_rate",
    "policy_lag", "gradient_lag", "sample_time_s", "update_time_s",
]


def advantage_moments(rollouts):
    """Mean and std of the advantages of the whole rollout, all workers together."""
    stats = [r.agent_stats for r in rollouts]
    if not all("advantage_count" in s for s in stats):
        return 0.0, 1.0
    count = sum(s["advantage_count"] for s in stats)
    mean = sum(s["advantage_sum"] for s in stats) / count
    var = max(sum(s["advantage_sq_sum"] for s in stats) / count - mean ** 2, 0.0)
    return float(mean), float(np.sqrt(var))


class PPOTrainer(NormalizedTrainer):
    def __init__(self, args, spec, plugins, spaces, run):
        self.args = args
        self.run = run  # core.run.RunContext: clock, stop rules, logger, summary
        self.placement = Placement(local=args.num_workers == 0)
        num_workers = max(1, args.num_workers)
        # On a small machine more workers than CPUs would leave actors unscheduled: share.
        cpus = run.cpus_per_actor(num_workers)
        self.workers = [self.placement.spawn(RolloutWorker, spec, i, num_cpus=cpus)
                        for i in range(num_workers)]
        # The test worker starts once the rollout workers run: on a small machine three actors
        # importing torch at once slow the start of training by a second or more.
        self.spec = spec
        self.evaluator = None
        torch.manual_seed(args.seed)
        self.model = plugins.model_cls(args, *spaces)
        if args.num_gpus and torch.cuda.is_available():
            self.model.to("cuda")  # the learner's update on the GPU; workers act on the CPU
        self.learner = Learner(self.model)
        self.make_obs_normalizer(args, spaces[0])
        self.num_epochs = int(getattr(args, "num_epochs", 1))
        self.graph = (self.compile_graph() if args.compiled_graph and not self.placement.local
                      else None)
        steps_per_iteration = num_workers * args.num_envs_per_worker * args.rollout_steps
        self.num_minibatches = max(1, round(steps_per_iteration / args.batch_size))

    def gradients(self, weights, request):
        """Every worker's GradientResult for one minibatch step, in one round trip."""
        if self.graph is not None:
            return ray.get(self.graph.execute(weights, request))
        return self.placement.get([w.fetch_grads.remote(weights, request) for w in self.workers])

    def compile_graph(self):
        """--compiled_graph: the lock-step gradient round trip as a Ray Compiled Graph, whose
        shared-memory channels replace a task submission per worker and step (measured: 0.74
        ms per round trip to two actors, against about 2.3 ms with ordinary calls)."""
        from ray.dag import InputNode, MultiOutputNode
        with InputNode() as request:
            dag = MultiOutputNode([w.fetch_grads.bind(request[0], request[1])
                                   for w in self.workers])
        return dag.experimental_compile()

    def train(self):
        try:
            return self._train()
        finally:
            if self.graph is not None:
                self.graph.teardown()
                self.graph = None

    def _train(self):
        args, run, placement = self.args, self.run, self.placement
        weights = placement.share(self.learner.get_weights())
        # Evaluations at multiples of --eval_interval, also after a restore.
        pending_eval = None
        next_eval = (run.env_steps // args.eval_interval + 1) * args.eval_interval
        iteration = 0
        while True:
            iteration += 1
            t0 = time.perf_counter()
            progress = min(1.0, run.env_steps / args.total_steps)
            acting_version = self.learner.version
            obs_statistics = self.obs_statistics()
            rollouts = placement.get([w.collect.remote(weights, acting_version,
                                                       args.rollout_steps, obs_statistics)
                                      for w in self.workers])
            run.env_steps += sum(r.env_steps for r in rollouts)
            self.merge_obs_moments(rollouts)
            sample_time = time.perf_counter() - t0
            mean, std = advantage_moments(rollouts)

            stats, grad_norms, gradient_lags = [], [], []
            for epoch in range(self.num_epochs):
                for minibatch in range(self.num_minibatches):
                    request = GradientRequest(epoch, minibatch, self.num_minibatches, mean, std,
                                              progress, self.learner.version)
                    results = self.gradients(weights, request)
                    gradient_lags += [self.learner.version - r.weights_version for r in results]
                    gradients = average_gradients([r.gradients for r in results],
                                                  [r.num_samples for r in results])
                    grad_norms.append(self.learner.apply(gradients, progress))
                    weights = placement.share(self.learner.get_weights())
                    stats += [r.stats for r in results]
            updates = self.num_epochs * self.num_minibatches

            # Evaluation runs on its own actor while training goes on; a new one starts only
            # when the last has reported (backpressure instead of a growing queue).
            eval_result = None
            if pending_eval is not None and placement.ready(pending_eval):
                eval_result, pending_eval = placement.get(pending_eval), None
            if pending_eval is None and run.env_steps >= next_eval:
                if self.evaluator is None:
                    self.evaluator = placement.spawn(Evaluator, self.spec, args.eval_episodes,
                                                     num_cpus=0)
                pending_eval = self.evaluator.evaluate.remote(weights, self.learner.version,
                                                              run.env_steps,
                                                              self.obs_statistics())
                next_eval = run.env_steps + args.eval_interval
                if placement.local:
                    eval_result, pending_eval = placement.get(pending_eval), None

            episode_returns = [x for r in rollouts for x in r.episode_returns]
            episode_lengths = [x for r in rollouts for x in r.episode_lengths]
            row = {
                "iteration": iteration, "updates": self.learner.version,
                "train_return": float(np.mean(episode_returns)) if episode_returns else None,
                "train_length": float(np.mean(episode_lengths)) if episode_lengths else None,
                "episodes": len(episode_returns),
                "grad_norm": float(np.mean(grad_norms)),
                "learning_rate": self.model.learning_rate(progress),
                # updates between the policy that acted and the one being updated (PPO epochs)
                "policy_lag": (updates - 1) / 2.0,
                # updates between the weights a gradient was computed with and the learner's
                "gradient_lag": float(np.max(gradient_lags)),
                "sample_time_s": sample_time,
                "update_time_s": time.perf_counter() - t0 - sample_time,
            }
            for key in stats[0] if stats else ():
                row[key] = float(np.mean([s[key] for s in stats]))
            if run.record(row, eval_result):
                break
        if pending_eval is not None:  # the last evaluation counts
            run.record_eval(placement.get(pending_eval))
        return self.learner

    # -- checkpoints -------------------------------------------------------------------------
    def get_state(self):
        """The workers' states between iterations (core/rollout.py:RolloutWorker.get_state)
        and the observation normalizer."""
        return {"workers": self.placement.get([w.get_state.remote() for w in self.workers]),
                **self.evaluation_state()}

    def set_state(self, state, fresh_episode_seed):
        """Returns True if every worker continues its episodes exactly."""
        self.load_evaluation_state(state)
        return restore_workers(self.placement, self.workers, state, fresh_episode_seed)

    def restore(self, weights, optimizer_state, updates):
        """Continue from a checkpoint: the learner's weights, optimizer state and version."""
        self.model.set_weights(weights)
        if optimizer_state is not None:
            self.learner.optimizer.load_state_dict(optimizer_state)
        self.learner.version = int(updates)

    def checkpoint_state(self):
        return (self.learner.get_weights(), self.learner.optimizer.state_dict(),
                self.learner.version)
