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

A dataset without an env (--env_name none, envs/no_env.py): the spaces are the dataset's
(``spaces_without_env``), no test worker is built and nothing is evaluated; the metrics rows'
losses are the run's report and last.pt its result.
"""
from core.algos.replay_trainer import ReplayTrainer, buffer_columns
from core.algos.trainers import register_trainer
from core.learning.replay_buffer import ReplayBuffer
from core.plugins import steps_an_env


@register_trainer("offline")
class OfflineTrainer(ReplayTrainer):
    """The replay loop on a dataset: the buffer filled once, no rollout workers, the step
    clock in updates (the module's docstring). A model names the replay loop; the replay loop
    hands a run with --dataset and --offline_ratio 1 to this one (``for_run``)."""

    @classmethod
    def spaces_without_env(cls, args):
        """--env_name none: the dataset's own spaces (read once more when the buffer fills)."""
        from core.data import load_dataset
        data = load_dataset(args.dataset)
        return data.observation_space, data.action_space

    @property
    def evaluates(self):
        """False with no env to step (--env_name none): no test worker, no evaluations."""
        return steps_an_env(self.plugins.env_cls)

    def evaluate(self):
        return super().evaluate() if self.evaluates else None

    def add_rollout_workers(self):
        """None: the dataset is the experience."""

    def make_buffer(self):
        """A buffer of the dataset's size holding its rows (normalized with the dataset's own
        statistics under --normalize_obs). Read again after the buffer died."""
        transitions = self.read_dataset()
        shapes, dtypes, action_dtype = buffer_columns(self.spaces, self.args.normalize_obs)
        buffer = self.placement.spawn(
            ReplayBuffer, self.dataset_rows, shapes, self.spaces[1].shape, num_cpus=0,
            observation_dtype=dtypes, action_dtype=action_dtype, seed=self.args.seed,
            with_discounts=transitions.discounts is not None, reward_scale=self.reward_scale)
        self.placement.get(buffer.add.remote(transitions))
        return buffer

    # -- the budgets: updates only, up to --total_steps ----------------------------------------
    def updates_allowed(self, env_steps, replay_size):
        """Up to --total_steps, pausing at the next evaluation's point while none is running:
        evaluations come at exact multiples of --eval_interval (as d3rlpy's epochs end),
        never a call's few updates past them."""
        budget = self.args.total_steps
        evaluations = self.evaluations
        if (self.evaluates and evaluations.pending is None
                and evaluations.next_eval is not None):
            budget = min(budget, evaluations.next_eval)
        return budget - self.base_updates

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
                f"counts updates" + ("" if self.evaluates else "; no env: nothing is "
                                     "evaluated, the losses are the report"))

    # -- checkpoints: the weights, the normalizer and the sampler, never the dataset's rows ----
    def get_state(self):
        return {**self.evaluation_state(),
                "dataset_sampler": self.placement.get(self.buffer.sampling_state.remote())}

    def set_state(self, state, fresh_episode_seed):
        """The normalizer and the buffer's sampler as saved: True (the run continues exactly)
        when the checkpoint has the sampler."""
        self.load_evaluation_state(state)
        sampler = state.get("dataset_sampler")
        if sampler is None:
            return False
        self.placement.get(self.buffer.load_sampling_state.remote(sampler))
        return True

    def summary_extra(self):
        return {**super().summary_extra(), "step_clock": "updates", "evaluated": self.evaluates}
