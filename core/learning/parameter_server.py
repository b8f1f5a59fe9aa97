"""Parameter server and learner workers for the replay-based (SAC) loop, after OpenAI's Rapid.

Learner workers sample nothing themselves: each gets a batch from the replay buffer and the
newest weights (both by object reference), returns gradients, and sends the new |TD errors| to
the buffer as priorities. The parameter server holds the only optimizer: it averages the
gradients of all learners for one version (never the last pusher's alone: every learner's
share of the batch counts), applies them, and hands out the weights with their version number. With a single
learner (--num_learners 1) the server computes the gradients itself (``update``): the weights
then never travel per update, only when a rollout or test worker asks for them.

GPUs (core/distributed/devices.py): whichever of the two computes the gradients (the server with one
learner, the learner workers with several) holds its model on the GPU it was given; gradients,
weights, TD errors and optimizer state leave it as CPU numpy arrays or tensors.
"""
import os

import numpy as np
import torch

from core.distributed.devices import device_info, plan_of, resolve_device, to_cpu
from core.learning import device_rounds
from core import seeding
from core.faults import all_finite
from core.learning.dataset_shard import DatasetShardHolder
from core.learning.learner import Learner, average_gradients
from core.plugins import load_plugins
from core.distributed.process import setup_process


def learner_threads(args):
    """--learner_threads (the replay loop's flag); 'auto' gives a process alone on the machine
    (--num_workers 0) two threads, as measured faster on 2 cores (BENCHMARKS.md, "Cost of one
    SAC update"); with Ray workers the other cores are theirs: --torch_threads. More than 2 is
    not measured."""
    wanted = args.learner_threads
    if wanted == "auto":
        alone = args.num_workers == 0 and (os.cpu_count() or 1) >= 2
        return 2 if alone else args.torch_threads
    return wanted


class ParameterServer(DatasetShardHolder):
    def __init__(self, spec, observation_space, action_space):
        setup_process(spec.loop, learner_threads(spec.loop))
        plugins = load_plugins(spec)
        torch.manual_seed(seeding.server_torch(spec.run.seed))
        self.model = plugins.model_cls(spec.model, observation_space, action_space)
        self.device = resolve_device(plan_of(spec).parameter_server_gpus,
                                     "the parameter server")
        self.model.to(self.device)  # before the optimizer: its state lives beside the weights
        self.learner = Learner(self.model)
        # For --num_learners 1 the server is the learner as well: no weights travel per update.
        self.agent = plugins.agent_cls(spec.agent, self.model, seed=spec.run.seed)
        self.seed = spec.run.seed
        self.group = None  # with --learner_sync allreduce: this process's AllreduceGroup
        self.configure_rounds(spec.loop)

    def configure_rounds(self, loop):
        """--device_rounds, --pin_batches, --cuda_graphs (core/learning/device_rounds.py):
        whether ``update`` runs its batches as one round that waits on the device once."""
        cuda = str(self.device).startswith("cuda")
        wanted = loop.device_rounds == "on" or (loop.device_rounds == "auto" and cuda)
        self.rounds = wanted and self.model.can_update_on_device()
        if wanted and not self.rounds and loop.device_rounds == "on":
            device_rounds.warn(f"--device_rounds on: model {type(self.model).__name__} has no "
                               f"update_on_inputs (models/base.py), so its updates run one by "
                               f"one")
        self.pin = cuda and loop.pin_batches
        note = device_rounds.graphs_note(self.model, self.device, loop.cuda_graphs)
        # auto: where it applies; asked for by name, a reason where it does not
        if note and loop.cuda_graphs == "on":
            device_rounds.warn(f"--cuda_graphs is not used: {note}")
        self.use_graphs = self.rounds and loop.cuda_graphs != "off" and note is None
        self.graph, self.graph_error = None, None
        self.compiled = device_rounds.compile_if_asked(self.model, loop.compile_update)

    def join_group(self, path, rank, shares):
        """Join the allreduce learner group (core/learning/allreduce.py) as ``rank`` (0: this is the
        parameter server, else a replica of it); every rank then holds rank 0's weights and
        draws its own sampling noise."""
        from core.learning.allreduce import AllreduceGroup
        self.group = AllreduceGroup(path, rank, shares)
        self.group.broadcast_model(self.model)
        torch.manual_seed(seeding.server_torch(self.seed, rank))
        return rank

    @property
    def version(self):
        return self.learner.version

    def get_weights(self):
        """The weights for rollout, learner and test workers, carrying their version."""
        return self.learner.weights_for_workers()

    def device_info(self):
        """Where the updates run, how (device rounds, CUDA graphs), and what --sac_precision
        auto measured there, if it did."""
        timings = getattr(self.model, "precision_timings", None)
        how = {"device_rounds": self.rounds, "pinned_batches": self.pin,
               "cuda_graphs": self.use_graphs and self.graph is not None,
               "compiled_update": self.compiled}
        if self.graph_error:
            how["cuda_graphs_error"] = self.graph_error
        return {**device_info(self.device), **how,
                **({"precision": timings} if timings else {})}

    def apply(self, *results, progress=0.0):
        """One update from the GradientResults of all learners, averaged by sample count, at
        ``progress`` (env steps / total steps: the learning-rate schedule's clock). An
        update whose loss or averaged gradient is NaN or inf is skipped: the stats then say
        ``skipped`` and the weights, optimizer and version stay as they were."""
        gradients = average_gradients([r.gradients for r in results],
                                      [r.num_samples for r in results])
        # updates between the weights each gradient was computed with and these
        lags = [self.learner.version - r.weights_version for r in results]
        stats = {k: float(np.mean([r.stats[k] for r in results]))
                 for k, v in results[0].stats.items() if np.isscalar(v)}
        grad_norm = self.learner.apply(gradients, progress) if all_finite(stats) else None
        return self.outcome(stats, grad_norm, float(np.mean(lags)))

    def apply_in_place(self, result, progress):
        """``apply`` for one result whose gradients are still in the model's .grad."""
        stats = {k: float(v) for k, v in result.stats.items() if np.isscalar(v)}
        lag = self.learner.version - result.weights_version  # 0 unless the model was swapped
        grad_norm = self.learner.apply_in_place(progress) if all_finite(stats) else None
        return self.outcome(stats, grad_norm, float(lag))

    def outcome(self, stats, grad_norm, gradient_lag):
        """An applied update's stats, or the skipped one's (grad_norm None)."""
        if grad_norm is None:
            return {"skipped": 1.0, "version": self.learner.version,
                    "why": "a loss is NaN or inf" if not all_finite(stats)
                    else "the gradient has NaN or inf"}
        stats.update(grad_norm=grad_norm, gradient_lag=gradient_lag, version=self.learner.version)
        return stats

    def update(self, batches, buffer=None, progress=0.0, own_rows=False):
        """The single-learner path: for each batch in turn, gradients on the server's own,
        newest weights, applied. Several batches per call spread one Ray round trip (and one
        wake-up of the driver) over several updates. Returns one stats dict per update.
        ``own_rows``: in an allreduce group, the batches are this rank's rows already (drawn
        from its dataset shard), not the whole batch."""
        if self.rounds and self.group is None:
            return self.update_round(batches, buffer, progress)
        stats, priorities = [], []
        for batch in batches:
            if self.group is not None and own_rows:
                share = self.group.shares[self.group.rank] / sum(self.group.shares)
            elif self.group is not None:  # this rank's rows; the allreduce makes it the whole
                batch, share = self.group.own_rows(batch)
            # The gradients stay in the model's .grad (no copies to numpy and back) unless the
            # model hands its own (collect_gradients not used): then the usual averaging path.
            with self.model.gradients_in_place():
                result = self.agent.fetch_grads(None, batch, progress=progress)
            td_errors = result.stats.pop("td_errors", None)
            if td_errors is not None and np.isfinite(td_errors).all():
                priorities.append((batch, td_errors))
            if self.group is not None:
                if result.gradients is not None:
                    raise RuntimeError(
                        f"model {type(self.model).__name__} hands back its gradients instead of "
                        f"leaving them in .grad (BaseModel.collect_gradients), so "
                        f"--learner_sync allreduce cannot average them; use --learner_sync server")
                self.group.allreduce(self.model, result.stats, share)
            stats.append(self.apply(result, progress=progress) if result.gradients is not None
                         else self.apply_in_place(result, progress))
        _send_all_priorities(buffer, priorities)
        return stats

    def update_on_shard(self, count, rows, progress=0.0):
        """``count`` updates on batches of ``rows`` rows drawn from this process's dataset
        shard (--shard_dataset): in an allreduce group, this rank's share of each batch."""
        return self.update(self.shard_batches(rows, count), None, progress,
                           own_rows=self.group is not None)

    def update_round(self, batches, buffer=None, progress=0.0):
        """``update`` as one round on the device (core/learning/device_rounds.py): the batches
        staged at once, each update computed and applied without a wait, the statistics read
        with one copy at the end. The same stats dicts (and priorities) as ``update``."""
        model, learner = self.model, self.learner
        staged = [device_rounds.stage_batch(b, self.device, self.pin) for b in batches]
        extras = model.update_extras(progress)
        results = device_rounds.RoundResults()
        start_version = learner.version
        for batch in staged:
            inputs = model.update_inputs(batch)
            scalars, td_errors = self.compute_on_device(inputs)
            norm, applied = learner.apply_on_device(list(scalars.values()), progress)
            results.add(scalars, td_errors, norm, applied, extras)
        stats, priorities, version = [], [], start_version
        for batch, (values, norm, applied, td) in zip(batches, results.read()):
            if td is not None and np.isfinite(td).all():
                priorities.append((batch, td))
            if applied:
                version += 1
                values.update(grad_norm=norm, gradient_lag=0.0, version=version)
                stats.append(values)
            else:
                stats.append({"skipped": 1.0, "version": version,
                              "why": "a loss is NaN or inf" if not all_finite(values)
                              else "the gradient has NaN or inf"})
        learner.version = version  # the skipped updates did not move the weights
        _send_all_priorities(buffer, priorities)
        return stats

    def compute_on_device(self, inputs):
        """The model's update_on_inputs, through its CUDA graph with --cuda_graphs (captured at
        the first batch; a batch of other shapes runs eagerly)."""
        if self.use_graphs:
            if self.graph is None:
                try:
                    self.graph = device_rounds.UpdateGraph(self.model, inputs)
                except Exception as exc:  # noqa: BLE001 - eager updates are still correct
                    self.use_graphs = False
                    self.graph_error = f"{type(exc).__name__}: {exc}"
                    device_rounds.warn(f"--cuda_graphs: capturing the update failed "
                                       f"({self.graph_error}); the updates run eagerly")
                    return self.model.update_on_inputs(*inputs)
            if self.graph.fits(inputs):
                scalars, td_errors = self.graph(inputs)
                return scalars, td_errors
        return self.model.update_on_inputs(*inputs)

    def optimizer_state(self):
        """On the CPU: checkpoints must load on machines without a GPU."""
        return to_cpu(self.learner.optimizer.state_dict())

    def state(self):
        weights, _, version = self.learner.state()
        return weights, self.optimizer_state(), version

    def load_state(self, weights, optimizer_state=None, version=0):
        """Continue from saved state (a checkpoint's model and optimizer state dicts)."""
        self.learner.load_state(weights, optimizer_state, version)
        return self.learner.version


class LearnerWorker(DatasetShardHolder):
    """Computes gradients for a learner that averages several: on replay batches for the
    parameter server (``compute``), or on its share of an on-policy batch (``adopt_data``,
    then ``fetch_grads`` per minibatch: the asynchronous loop's --num_learners)."""

    def __init__(self, spec, observation_space, action_space, learner_index=0, threads=None,
                 compile_update="off"):
        """``threads``: torch's threads here; None: the replay loop's --learner_threads.
        ``compile_update``: the replay loop's --compile_update."""
        setup_process(spec.loop, learner_threads(spec.loop) if threads is None else threads)
        plugins = load_plugins(spec)
        torch.manual_seed(seeding.learner_worker_torch(spec.run.seed, learner_index))
        self.model = plugins.model_cls(spec.model, observation_space, action_space)
        self.device = resolve_device(plan_of(spec).learner_worker_gpus,
                                     f"learner worker {learner_index}")
        self.model.to(self.device)
        self.agent = plugins.agent_cls(
            spec.agent, self.model, seed=seeding.learner_worker_agent(spec.run.seed,
                                                                     learner_index))
        self.compiled = device_rounds.compile_if_asked(self.model, compile_update)

    def compute(self, weights, weights_version, batch, buffer=None):
        result = self.agent.fetch_grads(weights, batch, weights_version)
        _send_priorities(result, batch, buffer)
        return result

    def compute_on_shard(self, weights, weights_version, rows):
        """``compute`` on ``rows`` rows drawn from this learner's dataset shard
        (--shard_dataset)."""
        return self.compute(weights, weights_version, self.shard_batches(rows, 1)[0])

    def adopt_data(self, parts):
        """Hold these fragments (rollout workers' exported data) as this learner's share of
        the batch; returns its valid samples."""
        return self.agent.adopt_data(parts)

    def fetch_grads(self, weights, request):
        """One minibatch's gradients on the share held, with these weights."""
        return self.agent.fetch_grads(weights, request)

    def get_state(self):
        """The agent's state (its minibatch RNG): a resumed run draws the same minibatches."""
        return self.agent.get_state()

    def set_state(self, state):
        self.agent.set_state(state)

    def device_info(self):
        """Where the updates run, and what --sac_precision auto measured there, if it did."""
        timings = getattr(self.model, "precision_timings", None)
        return {**device_info(self.device), **({"precision": timings} if timings else {})}


def _send_all_priorities(buffer, priorities):
    """[(batch, |TD errors|)] of one call's updates to a prioritized buffer (None: uniform) in
    one fire-and-forget call; the buffer ignores slots rewritten since."""
    if buffer is not None and priorities:
        buffer.update_priorities.remote(
            np.concatenate([b.indices for b, _ in priorities]),
            np.concatenate([b.generations for b, _ in priorities]),
            np.concatenate([p for _, p in priorities]))


def _send_priorities(result, batch, buffer):
    """New |TD errors| become the sampled slots' priorities (dropped from the stats)."""
    td_errors = result.stats.pop("td_errors", None)
    # A NaN priority would poison the sum tree for good: a bad batch keeps its old priorities.
    if buffer is not None and td_errors is not None and np.isfinite(td_errors).all():
        # Fire and forget: the buffer ignores updates for slots rewritten since sampling.
        buffer.update_priorities.remote(batch.indices, batch.generations, td_errors)



def spawn_learner(placement, spec, spaces, slot, threads=None, compile_update="off"):
    """A learner worker, with its share of the GPUs when there are several
    (core/distributed/devices.py); ``threads`` and ``compile_update`` as LearnerWorker takes
    them."""
    return placement.spawn(LearnerWorker, spec, *spaces, slot, threads, compile_update,
                           num_cpus=0, num_gpus=plan_of(spec).learner_worker_gpus)
