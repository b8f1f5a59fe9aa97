"""The off-policy loop learning from a dataset alone (--dataset, --offline_ratio 1): the replay
loop of core/algos/replay_trainer.py without rollout workers.

The dataset (core/data/: a Minari dataset, or D4RL-style arrays) is read once into a replay
buffer of exactly its size, in the columns and dtypes the online loop stores (a column per
observation leaf); the parameter server draws its batches there, learner workers too with
--num_learners above 1, and the test worker evaluates the weights in the env as in any run.
Nothing else steps an env, so the run's step clock counts gradient updates instead of env
steps: --total_steps, --eval_interval, --log_steps, --checkpoint_interval and the metrics'
``env_steps`` column are in updates (d3rlpy's ``n_steps`` likewise); summary.json says so
(``step_clock``).

Normalization as the offline papers do it: with --normalize_obs the observation statistics
are the dataset's, computed once, applied to the buffer's rows and frozen; they are saved with
every checkpoint (``ddrl.load`` acts with them). A restore reads the dataset again and puts
the buffer's sampler back where it was, so a resumed run draws the batches it would have.
"""
import numpy as np

from core.algos.replay_trainer import ReplayTrainer
from core.algos.trainers import register_trainer
from core.errors import ConfigError
from core.learning.normalizer import moments_of, normalize
from core.learning.replay_buffer import ReplayBuffer
from core.spaces import carried


def dataset_transitions(data, agent_cls, agent_config):
    """The dataset's transitions as the agent's buffer keeps them: with the discounts column
    (gamma^1 per row, from the agent's --gamma) for an agent whose transitions carry one (the
    DQN family's n-step transitions; offline they are one-step)."""
    transitions = data.transitions
    if not agent_cls.transition_discounts:
        return transitions
    n_step = getattr(agent_config, "n_step", 1)
    if n_step != 1:
        raise ConfigError(f"--n_step {n_step} with --dataset: a dataset's transitions are one "
                          f"step each, and ddrl does not rebuild n-step returns from them. "
                          f"Use --n_step 1.")
    gamma = getattr(agent_config, "gamma", None)
    if gamma is None:
        raise ConfigError(f"agent {agent_cls.__name__} stores discounted transitions but has "
                          f"no --gamma for a dataset's one-step rows.")
    return transitions._replace(discounts=np.full(len(transitions.rewards), gamma, np.float32))


@register_trainer("offline")
class OfflineTrainer(ReplayTrainer):
    """The replay loop on a dataset: the buffer filled once, no rollout workers, the step
    clock in updates (the module's docstring). A model names the replay loop; the replay loop
    hands a run with --dataset and --offline_ratio 1 to this one (``for_run``)."""

    @classmethod
    def check_plugins(cls, plugins, spec):
        super().check_plugins(plugins, spec)
        loop = spec.loop
        refused = [(loop.prioritized_replay, "--prioritized_replay"), (loop.her, "--her"),
                   (loop.replay_device == "cuda", "--replay_device cuda")]
        named = [flag for bad, flag in refused if bad]
        if named:
            raise ConfigError(f"--dataset with --offline_ratio 1 samples the dataset "
                              f"uniformly from a buffer on the host; {', '.join(named)} "
                              f"{'is' if len(named) == 1 else 'are'} not implemented for it. "
                              f"Leave {'it' if len(named) == 1 else 'them'} off.")

    def add_rollout_workers(self):
        """None: the dataset is the experience."""

    def make_buffer(self):
        """A buffer of the dataset's size holding its rows (normalized with the dataset's own
        statistics under --normalize_obs). Read again after the buffer died."""
        from core.data import load_dataset
        args, (observation_space, action_space) = self.args, self.spaces
        data = load_dataset(args.dataset, observation_space, action_space)
        transitions = dataset_transitions(data, self.plugins.agent_cls, self.spec.agent)
        if self.obs_normalizer is not None:
            if not self.obs_normalizer_from_data:
                self.obs_normalizer.update(moments_of(transitions.observations))
                self.obs_normalizer_from_data = True
            statistics = self.obs_normalizer.statistics()
            transitions = transitions._replace(
                observations=normalize(transitions.observations, statistics, args.obs_clip),
                next_observations=normalize(transitions.next_observations, statistics,
                                            args.obs_clip))
        shapes, dtypes = carried(observation_space, args.normalize_obs)
        action_dtype = np.asarray(transitions.actions).dtype
        buffer = self.placement.spawn(
            ReplayBuffer, len(data), shapes, action_space.shape, num_cpus=0,
            observation_dtype=dtypes, action_dtype=action_dtype, seed=args.seed,
            with_discounts=transitions.discounts is not None)
        self.placement.get(buffer.add.remote(transitions))
        self.dataset_rows = len(data)
        self.dataset_summary = data.summary()
        self.dataset_info = {"source": str(data.source), "transitions": len(data),
                             "episodes": int(len(data.episode_returns)),
                             "behaviour_return_mean": (float(np.mean(data.episode_returns))
                                                       if len(data.episode_returns) else None),
                             "behaviour_return_std": (float(np.std(data.episode_returns))
                                                      if len(data.episode_returns) else None)}
        return buffer

    obs_normalizer_from_data = False

    # -- the budgets: updates only, up to --total_steps ----------------------------------------
    def updates_allowed(self, env_steps, replay_size):
        return self.args.total_steps - self.base_updates

    def start_loop(self):
        super().start_loop()
        self.replay_size = self.dataset_rows
        self.next_log = min(self.next_log, self.args.total_steps)

    def book_updates(self, done):
        super().book_updates(done)
        self.run.env_steps = self.updates_done  # the step clock (the module's docstring)

    def metrics_row(self):
        row = super().metrics_row()
        row["utd_achieved"] = None
        # the last row comes at the budget's end: no env steps go on past it (updates stop)
        self.next_log = min(self.next_log, self.args.total_steps)
        return row

    def start_note(self):
        return (super().start_note() + f"; offline, {self.dataset_summary}; the step clock "
                f"counts updates")

    # -- checkpoints: the weights, the normalizer and the sampler, never the dataset's rows ----
    def get_state(self):
        return {**self.evaluation_state(),
                "dataset_sampler": self.placement.get(self.buffer.sampling_state.remote())}

    def set_state(self, state, fresh_episode_seed):
        """The normalizer and the buffer's sampler as saved: True (the run continues exactly)
        when the checkpoint has the sampler."""
        self.load_evaluation_state(state)
        if state.get("obs_normalizer") is not None:
            self.obs_normalizer_from_data = True
        sampler = state.get("dataset_sampler")
        if sampler is None:
            return False
        self.placement.get(self.buffer.load_sampling_state.remote(sampler))
        return True

    def summary_extra(self):
        return {**super().summary_extra(), "step_clock": "updates",
                "dataset": self.dataset_info}
