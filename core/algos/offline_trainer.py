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

Sharded (--shard_dataset, --num_learners N): no replay buffer actor; each process that
computes a share of the update holds every N-th row of the dataset and draws its rows there
(core/learning/dataset_shard.py). The driver reads nothing: the shards answer their sizes,
moments and the episodes' returns, the driver merges them (the normalizer's statistics, the
reward scale, the summary) and hands the result back for the shards to fill their buffers;
it keeps that answer, so a replacement learner fills its shard alone. Checkpoints keep each
shard's sampler.
"""
from core.algos.dataset_rows import dataset_discount, dataset_info
from core.algos.replay_trainer import (ReplayTrainer, buffer_columns, resolved_reward_scale,
                                       split_batch)
from core.algos.trainers import register_trainer
from core.errors import ConfigError
from core.learning.dataset_shard import merged_overview, shard_sizes_note
from core.learning.replay_buffer import ReplayBuffer
from core.plugins import steps_an_env


@register_trainer("offline")
class OfflineTrainer(ReplayTrainer):
    """The replay loop on a dataset: the buffer filled once, no rollout workers, the step
    clock in updates (the module's docstring). A model names the replay loop; the replay loop
    hands a run with --dataset and --offline_ratio 1 to this one (``for_run``)."""

    shards_datasets = True
    #: --shard_dataset: what the shards' buffers are filled with (fill_shard's keywords, once
    #: the first round merged their answers), the shards' sizes for the start line
    shard_fill, shards_note = None, ""

    def __init__(self, args, spec, plugins, spaces, run, faults, ray_starter=None):
        self.sharded = bool(args.shard_dataset)
        if self.sharded:
            self.check_sharding(args)
        super().__init__(args, spec, plugins, spaces, run, faults, ray_starter)
        if self.sharded:
            self.fill_shards()

    @staticmethod
    def check_sharding(args):
        why = [what for bad, what in (
            (args.num_learners < 2, f"--num_learners {args.num_learners} (a shard per learner: "
                                    f"2 or more)"),
            (args.prioritized_replay, "--prioritized_replay (priorities need the whole "
                                      "dataset in one buffer)"),
            (args.checkpoint_buffer, "--checkpoint_buffer (the shards are read from the "
                                     "dataset again on restore, their samplers saved)"))
            if bad]
        if why:
            raise ConfigError(f"--shard_dataset spreads the dataset over the learners, which "
                              f"does not go with {'; '.join(why)}. Drop --shard_dataset, or "
                              f"change those.")

    @classmethod
    def spaces_without_env(cls, args):
        """--env_name none: the dataset's own spaces (a Minari dataset's from its metadata,
        no row read; a file of arrays is read for them, and once more when the buffer fills)."""
        from core.data import dataset_spaces
        return dataset_spaces(args.dataset)

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
        statistics under --normalize_obs). Read again after the buffer died. None with
        --shard_dataset: the learners hold the rows."""
        if self.sharded:
            return None
        transitions = self.read_dataset()
        shapes, dtypes, action_dtype = buffer_columns(self.spaces, self.args.normalize_obs)
        buffer = self.placement.spawn(
            ReplayBuffer, self.dataset_rows, shapes, self.spaces[1].shape, num_cpus=0,
            observation_dtype=dtypes, action_dtype=action_dtype, seed=self.args.seed,
            with_discounts=transitions.discounts is not None, reward_scale=self.reward_scale)
        self.placement.get(buffer.add.remote(transitions))
        return buffer

    # -- --shard_dataset: the rows in the learners ----------------------------------------------
    def shard_holders(self):
        """[(shard index, handle)]: the learner workers by slot, or with --learner_sync
        allreduce the parameter server and its replicas by rank."""
        if self.allreduce:
            return list(enumerate([self.server, *self.replicas]))
        return [(m.slot, m.handle) for m in sorted(self.learners.members, key=lambda m: m.slot)]

    def hold_shard(self, index, handle):
        """Ask ``handle`` to read shard ``index``: the ref of its answer."""
        args = self.args
        return handle.hold_shard.remote(
            args.dataset, self.spaces, index, args.num_learners,
            dataset_discount(self.plugins.agent_cls, self.spec.agent),
            self.obs_normalizer is not None)

    def fill_shards(self, holders=None):
        """Every shard (``holders``, default all) read and filled. The first time the
        answers are merged into the run's view of the dataset (the module's docstring);
        after that the kept fill is used."""
        holders = self.shard_holders() if holders is None else holders
        answers = self.placement.get([self.hold_shard(i, h) for i, h in holders])
        if self.shard_fill is None:
            overview, moments = merged_overview(answers)
            if moments is not None and not self.obs_normalizer.frozen:
                for part in moments:
                    self.obs_normalizer.update(part)
                self.obs_normalizer.frozen = True
            self.dataset_rows = len(overview)
            self.reward_scale = resolved_reward_scale(self.args.reward_scale, overview)
            self.dataset_summary = overview.summary() + (
                f", rewards x {self.reward_scale:.4g}" if self.reward_scale != 1.0 else "")
            self.dataset_info = {**dataset_info(overview), "reward_scale": self.reward_scale,
                                 "shards": [a["rows"] for a in answers]}
            self.shards_note = shard_sizes_note(answers)
            self.shard_fill = {
                "columns": buffer_columns(self.spaces, self.args.normalize_obs),
                "statistics": (None if self.obs_normalizer is None
                               else self.obs_normalizer.statistics()),
                "obs_clip": self.args.obs_clip, "reward_scale": self.reward_scale,
                "seed": self.args.seed}
        self.placement.get([h.fill_shard.remote(**self.shard_fill) for _, h in holders])

    def make_core(self):
        """The parameter server (and replicas) again; with --shard_dataset under allreduce
        their shards are read again once the first fill is known (a recovery)."""
        super().make_core()
        if self.sharded and self.allreduce and self.shard_fill is not None:
            self.fill_shards()

    def make_learner(self, slot, generation, local, node=None):
        """A learner worker; with --shard_dataset a replacement reads its shard at once."""
        handle = super().make_learner(slot, generation, local, node)
        if self.sharded and not self.allreduce and self.shard_fill is not None:
            self.fill_shards([(slot, handle)])
        return handle

    def learner_gradients(self, buffer):
        if not self.sharded:
            return super().learner_gradients(buffer)
        return [learner.handle.compute_on_shard.remote(self.learner_weights,
                                                       self.learner_version, share)
                for learner, share in self.learner_shares()]

    def server_updates(self, count, buffer, progress):
        if not self.sharded:
            return super().server_updates(count, buffer, progress)
        ranks = [self.server, *self.replicas]
        shares = split_batch(self.args.batch_size, len(ranks))
        refs = [rank.update_on_shard.remote(count, share, progress=progress)
                for rank, share in zip(ranks, shares)]
        self.replica_updates[refs[0]] = refs[1:]
        return refs[0]

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
        shards = f" in {self.shards_note}" if self.sharded else ""
        return (super().start_note() + f"; offline, {self.dataset_summary}{shards}; the step clock "
                f"counts updates" + ("" if self.evaluates else "; no env: nothing is "
                                     "evaluated, the losses are the report"))

    # -- checkpoints: the weights, the normalizer and the sampler, never the dataset's rows ----
    def get_state(self):
        if self.sharded:
            return {**self.evaluation_state(), "dataset_shard_samplers": self.placement.get(
                [h.shard_sampling_state.remote() for _, h in self.shard_holders()])}
        return {**self.evaluation_state(),
                "dataset_sampler": self.placement.get(self.buffer.sampling_state.remote())}

    def set_state(self, state, fresh_episode_seed):
        """The normalizer and the buffer's (or shards') sampler as saved: True (the run
        continues exactly) when the checkpoint has the sampler of this run's layout."""
        self.load_evaluation_state(state)
        if self.sharded:
            samplers, holders = state.get("dataset_shard_samplers"), self.shard_holders()
            if samplers is None or len(samplers) != len(holders):
                return False
            self.placement.get([h.load_shard_sampling_state.remote(sampler)
                                for (_, h), sampler in zip(holders, samplers)])
            return True
        sampler = state.get("dataset_sampler")
        if sampler is None:
            return False
        self.placement.get(self.buffer.load_sampling_state.remote(sampler))
        return True

    def summary_extra(self):
        # evaluated: an evaluation returned (a run with an env but shorter than --eval_interval
        # has none), not merely that the run has an env to play
        return {**super().summary_extra(), "step_clock": "updates",
                "evaluated": self.evaluates and self.run.last_eval_return is not None}
