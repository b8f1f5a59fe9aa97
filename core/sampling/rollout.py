"""Rollout worker: steps ``--num_envs_per_worker`` envs with batched inference, in fragments,
and hands each fragment to its agent; the learner then asks it for gradients.

The same class runs as a Ray actor (``--num_workers N``) or in the driver (``--num_workers 0``).
"""
import copy
import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import numpy as np
import torch
from gymnasium import spaces as gym_spaces

from core.distributed.devices import device_info, learning_model, plan_of, resolve_device
from core.sampling.batched import make_env_group
from core.sampling.envs import check_finite_observations, check_valid_actions
from core.sampling.memory import EnvMemory
from core.learning.normalizer import discount_step, moments_of, normalize, scale_fragment
from core.distributed.placement import resolve
from core.plugins import load_plugins
from core import seeding, spaces
from core.distributed.process import setup_process
from core.run.state import generator_state, set_generator_state
from core.types import FragmentMemory, RolloutStats, Trajectory


class RolloutWorker:
    def __init__(self, spec, worker_index=0, generation=0, random_steps=0):
        """``generation`` counts replacements of this worker slot (core/sampling/worker_group.py): a
        replacement draws other seeds than the worker it replaces (never the same episodes
        again). ``random_steps``: env steps this worker acts uniformly at random first (its
        share of an off-policy loop's warm-up; the loop gives a replacement none)."""
        args = spec.run
        setup_process(args)
        plugins = load_plugins(spec)
        self.env_cls = plugins.env_cls  # (named when its observations are not finite)
        self.worker_index = worker_index
        torch.manual_seed(seeding.worker_torch(args.seed, worker_index, generation))
        self.envs = make_env_group(plugins, spec.env, seeding.worker_envs(args.seed, worker_index,
                                                                args.num_envs_per_worker,
                                                                generation),
                             placement=args.env_placement, worker_index=worker_index)
        self.model = plugins.model_cls(spec.model, self.envs.observation_space,
                                       self.envs.action_space)
        # Acting stays on the CPU; the agent learns on this worker's GPU share, if it has one
        # (core/distributed/devices.py: PPO's workers compute the gradients).
        device = resolve_device(plan_of(spec).rollout_worker_gpus,
                                f"rollout worker {worker_index}")
        self.agent = plugins.agent_cls(spec.agent, learning_model(self.model, device),
                                       seed=seeding.worker_agent(args.seed, worker_index,
                                                                 generation))
        # Envs whose opponents are the policy's own snapshots act them with the model acting
        # now (envs/pettingzoo_aec.py); bound before the first reset, where an opponent may
        # move first. Guarded like every reset (core/sampling/envs.py): an env that raises here
        # is rebuilt; the errors are reported with the first fragment's stats.
        self.acting_model = self.model
        self.envs.bind_policy(lambda: self.acting_model)
        self.observations = self.envs.reset()
        num_envs = len(self.envs)
        # --record_dataset: this worker's steps into a shard of the run's dataset
        self.recorder = None
        if args.record_dataset:
            from core.plugins import env_label
            from core.sampling.recording import StepRecorder
            self.recorder = StepRecorder(
                args.record_dataset, worker_index, generation, self.envs.observation_space,
                self.envs.action_space, num_envs, env_id=env_label(plugins.env_cls, spec.env),
                algorithm_name=f"ddrl {spec.model_name}")
        self.episode_return = np.zeros(num_envs)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        # each env's discounted return so far, for --normalize_reward's statistics
        self.discounted_return = np.zeros(num_envs)
        self.random_steps_left = int(random_steps)
        self.envs.action_space.seed(seeding.worker_torch(args.seed, worker_index, generation))
        self.normalize_obs = args.normalize_obs
        self.has_mask = self.envs.layout.has_mask
        # the dtypes of the observation arrays in a fragment (core/spaces.py carried)
        self.carried_dtypes = spaces.carried(self.envs.observation_space, args.normalize_obs)[1]
        self.obs_clip = args.obs_clip
        # A model that can act without its values (PPO's choose_actions(..., values=False))
        # gets them for the whole fragment at once after it: a slow env's step starts with
        # cold caches, and a second network per step is a large part of what the step costs.
        # (Not when the model says its values come with its actions: a shared CNN encoder.)
        self.values_later = ("values" in inspect.signature(self.model.choose_actions).parameters
                             and callable(getattr(self.model, "predict_values", None))
                             and not getattr(self.model, "values_with_actions", False)
                             and not self.model.recurrent)
        # A model with memory: each env slot's recurrent state, carried across steps and
        # fragments (a replacement worker starts from fresh episodes, so from the initial one).
        self.memory = EnvMemory(self.model, num_envs)
        # Sampling ahead (collect's ``ahead``): the acting model, its weights and version, the
        # sampler thread and the fragment it is sampling.
        self.acting_model, self.acting_version, self.acting_weights = self.model, None, None
        self.executor, self.ahead = None, None
        # Which of the run's env slots this worker's envs are (models/base.py
        # assign_env_slots: e.g. Ape-X's epsilon per actor), and the run's progress the loop
        # last gave (begin_fragment's: an exploration schedule's clock).
        slots = worker_index * args.num_envs_per_worker + np.arange(num_envs)
        self.model.assign_env_slots(slots, max(1, args.num_workers) * args.num_envs_per_worker)
        self.progress = None

    def collect(self, weights, weights_version, num_steps, obs_statistics=None, ahead=False,
                export=False, progress=None, reward_scaling=None):
        """A fragment of ``num_steps`` steps in each env, handed to the agent; returns
        core.types.RolloutStats.

        Plain (``ahead`` False, the first call, an in-process worker): the fragment is sampled
        now with these weights. Sampling ahead (``ahead`` True, --sample_ahead): the fragment
        returned is the one this worker sampled since its previous call, with the weights of that
        call, and the next one starts at once in a background thread with these weights, while
        the learner works on this one (it asks this worker for gradients meanwhile). The data
        are then one round behind the learner: ``weights_version`` and the agent's log-probs
        and values are those of the policy that acted, and PPO's clipped ratio bounds the step
        as in APPO and DD-PPO. A fragment sampled ahead is always delivered, also when the
        next call asks for plain sampling.

        With --normalize_obs, the policy, the fragment and the agent see observations
        normalized with ``obs_statistics`` (mean, var), and the stats carry the moments of the
        raw ones. With ``reward_scaling`` (--normalize_reward: the driver's (moments, gamma,
        clip), core/learning/normalizer.py RewardNormalizer) the fragment's rewards are divided
        by the standard deviation of the discounted returns (those moments and the fragment's
        own) and clipped, and the stats carry the fragment's moments; the episodes' returns
        stay the env's. With ``export``, the stats carry the agent's data of the fragment
        (``RolloutStats.data``) for a gradient worker to compute on (``absorb``).

        A step whose env raised (core/sampling/envs.py rebuilt it) is kept as an invalid cut
        (``Trajectory.valid``): reward 0, truncated, its final observation the one the policy
        saw, so nothing bootstraps across the cut. The step before it, if it did not end its
        episode, becomes truncated at that same observation: the last real transition then
        bootstraps from the real state where the episode was cut, as at a time limit. The cut
        episode is not reported as finished.

        ``progress``: the run's env steps over --total_steps, for the model's
        ``begin_fragment`` (None: the loop does not say)."""
        if progress is not None:
            self.progress = progress
        if self.ahead is not None:
            sampled = self.take_ahead()
        else:
            self.use_weights(weights, weights_version, ahead)
            sampled = self.sample(num_steps, obs_statistics, reward_scaling)
        if ahead:  # the envs go on at once; the agent's work below overlaps with them
            self.use_weights(weights, weights_version, ahead=True)
            self.ahead = self.sampler().submit(self.sample, num_steps, obs_statistics,
                                               reward_scaling)
        stats = self.deliver(sampled)
        if export:
            stats.data = self.agent.export_data()
        return stats

    def absorb(self, others):
        """Compute this round's gradients on the union of this worker's fragment and
        ``others`` (other workers' exported data); returns the samples this worker now holds."""
        return self.agent.absorb_data(others)

    # -- sampling ahead --------------------------------------------------------------------------
    def use_weights(self, weights, version, ahead):
        """Load the weights to act with. Plain sampling on the CPU acts with the agent's own
        model. Sampling ahead acts with a model apart (a copy), which the learner's gradient
        calls on the agent's model leave alone; so does a worker whose agent learns on a GPU
        (it acts with the CPU model it was built with)."""
        if not ahead and self.agent.model is self.model:
            self.agent.sync_weights(weights, version)
            self.acting_model = self.model
            self.acting_version = version
            return
        if self.acting_model is self.agent.model:  # the first fragment sampled apart
            self.acting_model = copy.deepcopy(self.model)
            self.acting_version = None
        if weights is not None and version != self.acting_version:
            self.acting_model.set_weights(weights)
        self.acting_version = version
        self.acting_weights = weights

    def sampler(self):
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ddrl-sampler")
        return self.executor

    def take_ahead(self):
        """The fragment sampled ahead, waited for (an env failure in it is raised here)."""
        future, self.ahead = self.ahead, None
        return future.result()

    def drop_ahead(self):
        """Wait for a fragment sampled ahead and forget it (a restore replaces the state)."""
        if self.ahead is not None:
            try:
                self.take_ahead()
            except Exception:  # noqa: BLE001 - its data are dropped anyway
                pass

    def random_actions(self, observations):
        """One uniform random action per env (an off-policy loop's warm-up); with a Discrete
        action space and an action mask, uniform over each env's allowed actions."""
        space = self.envs.action_space
        masks = (observations[spaces.ACTION_MASK]
                 if self.has_mask and isinstance(space, gym_spaces.Discrete) else None)
        if masks is None:
            return np.stack([space.sample() for _ in range(len(self.envs))])
        return np.stack([space.sample(mask=np.asarray(mask, dtype=np.int8)) for mask in masks])

    def deliver(self, sampled):
        """Hand a sampled fragment to the agent; the RolloutStats the trainer gets. The agent
        bootstraps with the values of the policy that acted: its model gets those weights first
        (a no-op for plain sampling, which acted with that very model)."""
        trajectory, stats, acting_weights = sampled
        if acting_weights is not None:
            self.agent.sync_weights(acting_weights, trajectory.weights_version)
        stats.agent_stats = self.agent.send_trajectory(trajectory) or {}
        return stats

    def fragment_values(self, model, obs_buf):
        """The acting model's values of a whole fragment in one batch: the same numbers as one
        call per step, for a fraction of the cost (see ``values_later``)."""
        num_steps, num_envs = spaces.leaves(obs_buf)[0].shape[:2]
        values = model.predict_values(spaces.reshape_leading(obs_buf, 2,
                                                             (num_steps * num_envs,)))
        return values.reshape(num_steps, num_envs, *values.shape[1:])  # [T, E, K]: per agent

    def sample(self, num_steps, obs_statistics=None, reward_scaling=None):
        """Step every env ``num_steps`` times with the acting model: (Trajectory, RolloutStats
        without the agent's statistics, the weights it acted with when they are not the agent's
        model's own, else None)."""
        model, weights_version = self.acting_model, self.acting_version
        acting_weights = self.acting_weights if model is not self.agent.model else None
        start = time.perf_counter()
        num_envs = len(self.envs)
        # Observations as core/spaces.py carries them (uint8 pixels stay uint8: 4x less
        # memory and transfer than float32); float ones, and normalized ones, are float32.
        carried = self.carried_dtypes
        obs_buf = spaces.tree_map(lambda a, dtype: np.empty((num_steps, *a.shape), dtype),
                                  self.observations, carried)
        rewards = np.empty((num_steps, num_envs), dtype=np.float32)
        terminated = np.empty((num_steps, num_envs), dtype=bool)
        truncated = np.empty((num_steps, num_envs), dtype=bool)
        valid = np.ones((num_steps, num_envs), dtype=bool)
        actions, log_probs, values = [], [], []
        report = {}  # {name: [T, E, ...]}: what the envs report beside the reward
        truncated_index, truncated_obs = [], []
        terminal_index, terminal_obs = [], []
        memory = self.memory
        if memory.active:  # what the fragment's FragmentMemory holds
            state_buf = spaces.allocate(memory.state, (num_steps,))
            starts_buf = np.empty((num_steps, num_envs), dtype=bool)
            truncated_states, truncated_starts = [], []
        finished_returns, finished_lengths, finished_metrics = [], [], []
        raw_seen = (spaces.tree_map(np.empty_like, obs_buf) if self.normalize_obs else None)
        returns_seen = (np.empty((num_steps, num_envs)) if reward_scaling is not None
                        else None)
        env_errors = [dict(worker=self.worker_index, **error, step=None)  # initial reset etc.
                      for error in self.envs.take_reset_errors()]

        def seen(obs):  # what the policy sees
            return normalize(obs, obs_statistics, self.obs_clip) if self.normalize_obs else obs

        begin_fragment = getattr(model, "begin_fragment", None)
        if begin_fragment is not None:  # e.g. gSDE draws its exploration matrices here
            begin_fragment(num_envs, self.progress)

        for t in range(num_steps):
            if raw_seen is not None:
                spaces.assign(raw_seen, t, self.observations)
            spaces.assign(obs_buf, t, seen(self.observations))
            if self.has_mask:
                check_valid_actions(self.observations, self.envs.action_space,
                                    lambda e: f"env {e} of rollout worker {self.worker_index}, "
                                              f"at step {self.episode_length[e]} of its episode,")
            obs_t = spaces.take(obs_buf, t)
            if memory.active:  # the state every step is taken from, random ones included
                spaces.assign(state_buf, t, memory.state)
                starts_buf[t] = memory.starts
                state_before, starts_before = memory.state, starts_buf[t]
            if self.random_steps_left > 0:  # warm-up with uniform random (valid) actions
                # A policy with memory still sees the observations: its state moves on as the
                # fragment records it (the replay loop's sequences start from stored states)
                if memory.active:
                    memory.act(model, obs_t)
                action = self.random_actions(obs_t)
                extras = {}
                self.random_steps_left -= num_envs
            elif self.values_later:
                action, extras = model.choose_actions(obs_t, values=False)
            elif memory.active:
                action, extras = memory.act(model, obs_t)
            else:
                action, extras = model.choose_actions(obs_t)
            result = self.envs.step(action)
            if self.recorder is not None:
                self.recorder.record(self.observations, action, result)
            actions.append(action)
            if "log_probs" in extras:
                log_probs.append(extras["log_probs"])
            if "values" in extras:
                values.append(extras["values"])
            rewards[t], terminated[t], truncated[t] = (result.rewards, result.terminated,
                                                       result.truncated)
            for name, value in (result.step_report or {}).items():
                if name not in report:  # (steps before its first report: zeros)
                    report[name] = np.zeros((num_steps, *value.shape), np.float32)
                report[name][t] = value
            env_errors.extend(dict(worker=self.worker_index, **error, step=t)
                              for error in result.errors)
            cut = result.cut
            for e in np.flatnonzero(cut):
                valid[t, e] = False
                rewards[t, e], terminated[t, e], truncated[t, e] = 0.0, False, True
                truncated_index.append((t, e))
                truncated_obs.append(spaces.take(obs_buf, (t, e)))
                cut_here = [(state_before, starts_before[e])] if memory.active else []
                if t > 0 and not (terminated[t - 1, e] or truncated[t - 1, e]):
                    truncated[t - 1, e] = True
                    truncated_index.append((t - 1, e))
                    truncated_obs.append(spaces.take(obs_buf, (t, e)))
                    cut_here *= 2
                if memory.active:  # valued from the state step t was taken from
                    truncated_states += [spaces.take(state, e) for state, _ in cut_here]
                    truncated_starts += [start for _, start in cut_here]
                # At t = 0 the step before is in the last fragment, whose last observation was
                # obs_buf[0, e]: it bootstraps from the real state already.
            if returns_seen is not None:  # (after the cuts: a cut step's reward is 0)
                returns_seen[t] = discount_step(self.discounted_return, rewards[t],
                                                terminated[t] | truncated[t], reward_scaling[1])
            self.episode_return += result.rewards
            self.episode_length += 1
            for e in np.flatnonzero(cut):  # a cut episode is not a finished one
                self.episode_return[e] = 0.0
                self.episode_length[e] = 0
            finished_metrics.extend(result.episode_metrics.values())
            for e, final_obs in result.final_observations.items():
                if result.truncated[e] and not result.terminated[e]:
                    truncated_index.append((t, e))
                    truncated_obs.append(seen(final_obs))
                    if memory.active:  # valued from the state after step t
                        truncated_states.append(spaces.take(memory.state, e))
                        truncated_starts.append(False)
                elif result.terminated[e]:
                    terminal_index.append((t, e))
                    terminal_obs.append(seen(final_obs))
                finished_returns.append(float(self.episode_return[e]))
                finished_lengths.append(int(self.episode_length[e]))
                self.episode_return[e] = 0.0
                self.episode_length[e] = 0
            self.observations = result.observations
            memory.episodes_ended(result.terminated | result.truncated | cut)

        return_moments = None
        if returns_seen is not None:
            rewards, return_moments = scale_fragment(rewards, returns_seen, reward_scaling)
        check_finite_observations(
            raw_seen if raw_seen is not None else obs_buf, self.env_cls,
            lambda index: f"env {index[1]} of rollout worker {self.worker_index}, step "
                          f"{index[0]} of a {num_steps}-step fragment")
        fragment_memory = None
        if memory.active:
            fragment_memory = FragmentMemory(
                states=state_buf, episode_starts=starts_buf,
                last_state=spaces.copy(memory.state), last_starts=memory.starts.copy(),
                truncated_states=(spaces.stack(truncated_states) if truncated_states else
                                  spaces.allocate(spaces.take(memory.state, 0), (0,))),
                truncated_starts=np.array(truncated_starts, dtype=bool))
        trajectory = Trajectory(
            observations=obs_buf, actions=np.stack(actions), rewards=rewards,
            terminated=terminated, truncated=truncated,
            log_probs=np.stack(log_probs) if len(log_probs) == num_steps else None,
            values=(np.stack(values) if len(values) == num_steps else
                    self.fragment_values(model, obs_buf) if len(log_probs) == num_steps
                    and self.values_later else None),
            last_observations=spaces.tree_map(lambda a, dtype: np.asarray(a, dtype),
                                              seen(self.observations), carried),
            truncated_index=np.array(truncated_index, dtype=np.int64).reshape(-1, 2),
            truncated_observations=(
                spaces.tree_map(lambda a, dtype: np.asarray(a, dtype),
                                spaces.stack(truncated_obs), carried) if truncated_obs
                else spaces.allocate(spaces.take(obs_buf, (0, 0)), (0,))),
            weights_version=weights_version, valid=valid, memory=fragment_memory,
            terminal_index=np.array(terminal_index, dtype=np.int64).reshape(-1, 2),
            terminal_observations=(
                spaces.tree_map(lambda a, dtype: np.asarray(a, dtype),
                                spaces.stack(terminal_obs), carried) if terminal_obs
                else spaces.allocate(spaces.take(obs_buf, (0, 0)), (0,))),
            step_report=report or None)
        return trajectory, RolloutStats(
            env_steps=trajectory.num_steps, episode_returns=finished_returns,
            # the version of the weights that really acted (the stamp the model loaded with
            # them, core/types.py WEIGHTS_VERSION_KEY), not the one the caller named
            episode_lengths=finished_lengths, weights_version=model.weights_version,
            sample_time_s=time.perf_counter() - start,
            obs_moments=(moments_of(spaces.reshape_leading(raw_seen, 2, (-1,)))
                         if raw_seen is not None else None),
            return_moments=return_moments,
            env_errors=env_errors, episode_metrics=finished_metrics), acting_weights

    def collect_to_buffer(self, weights, weights_version, num_steps, buffer, prioritized=False,
                          obs_statistics=None, progress=None, whole_episodes=False):
        """Collect a fragment and add it to the replay buffer as one block (never one call per
        step: a call costs about a millisecond). With prioritized replay the worker computes the new data's
        initial priorities, |TD error| under its current weights, as in Ape-X. With
        ``whole_episodes`` the agent hands only finished episodes (agents/base.py
        OffPolicyAgent.whole_episodes), told before the fragment reaches it."""
        if whole_episodes:
            self.agent.whole_episodes = True
        stats = self.collect(weights, weights_version, num_steps, obs_statistics,
                             progress=progress)
        transitions = self.agent.take_transitions()
        if transitions is None or not len(transitions.rewards):
            return stats  # e.g. no episode finished (whole_episodes): no call to the buffer
        priorities = self.agent.priorities(transitions) if prioritized else None
        resolve(buffer.add.remote(transitions, priorities))  # backpressure: one wait per block
        return stats

    # -- checkpoints ---------------------------------------------------------------------------
    def get_state(self):
        """Where this worker stands between fragments, as plain data (core/run/state.py): the
        current observations and unfinished episodes, the warm-up left, the RNGs (torch's of
        this process, the action space's, the agent's, the acting model's) and the envs' own states (None when an
        env cannot give one; a restore then starts fresh episodes). A fragment being sampled
        ahead is finished first and stays for the next collect (its steps are not counted yet,
        so a restore from here leaves it out, as a fragment never sampled)."""
        if self.ahead is not None:
            futures_wait([self.ahead])
        return {"observations": spaces.copy(self.observations),
                "episode_return": self.episode_return.copy(),
                "episode_length": self.episode_length.copy(),
                "discounted_return": self.discounted_return.copy(),
                "random_steps_left": int(self.random_steps_left),
                "torch_rng": torch.get_rng_state(),
                "action_space_rng": generator_state(self.envs.action_space.np_random),
                "agent": self.agent.get_state(),
                "memory": self.memory.get_state(),
                "acting_rng": (generator_state(self.acting_model.acting_rng)
                               if hasattr(self.acting_model, "acting_rng") else None),
                "envs": self.envs.get_state()}

    def set_state(self, state, fresh_episode_seed=None):
        """Continue from ``get_state``'s result. Returns True if the episodes continue exactly
        where they were, False if the envs could not be restored and were reset (seeded with
        ``fresh_episode_seed`` + env index, so a resumed run does not replay its first
        episodes)."""
        self.drop_ahead()
        torch.set_rng_state(torch.as_tensor(state["torch_rng"], dtype=torch.uint8))
        set_generator_state(self.envs.action_space.np_random, state["action_space_rng"])
        self.agent.set_state(state["agent"])
        if state.get("acting_rng") is not None and hasattr(self.acting_model, "acting_rng"):
            set_generator_state(self.acting_model.acting_rng, state["acting_rng"])
        self.random_steps_left = int(state["random_steps_left"])
        if state["envs"] is not None and self.envs.fits_state(state["envs"]):
            self.envs.set_state(state["envs"])
            self.observations = spaces.tree_map(np.asarray, state["observations"])
            self.episode_return = np.asarray(state["episode_return"], dtype=np.float64).copy()
            self.episode_length = np.asarray(state["episode_length"], dtype=np.int64).copy()
            self.discounted_return = np.asarray(
                state.get("discounted_return", np.zeros(len(self.envs))), np.float64).copy()
            self.memory.set_state(state.get("memory"))
            return True
        seed = fresh_episode_seed if fresh_episode_seed is not None else 0
        self.observations = self.envs.reset_all(seed + j for j in range(len(self.envs)))
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0
        self.discounted_return[:] = 0.0
        self.memory.reset()
        self.agent.episodes_restarted()
        return False

    def fetch_grads(self, weights, request):
        return self.agent.fetch_grads(weights, request)

    def device_info(self):
        """Where this worker's agent computes its gradients (core/distributed/devices.py)."""
        return device_info(getattr(self.agent.model, "device", "cpu"))

    def spaces(self):
        return self.envs.observation_space, self.envs.action_space

    def close_recorder(self):
        """--record_dataset: the shard written whole (the episodes still running left out);
        its directory, or None."""
        if self.recorder is None:
            return None
        recorder, self.recorder = self.recorder, None
        return recorder.close()

    def close(self):
        self.close_recorder()
        self.drop_ahead()
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        self.envs.close()


def make_rollout_worker(spec, slot, generation, local, num_cpus=1.0, node=None,
                        random_steps=0):
    """A rollout worker for a core.sampling.worker_group.WorkerGroup slot: in this process (a
    LocalHandle) or as a Ray actor reserving ``num_cpus`` (on Ray node ``node`` if it has room:
    a replacement's), acting at random for its first ``random_steps``."""
    from core.distributed.placement import LocalHandle, actor_options, remote_class, spread
    if local:
        return LocalHandle(RolloutWorker(spec, slot, 0, random_steps))
    # SPREAD: on a cluster, workers go to different nodes (one node lost costs the fewest);
    # on one machine it changes nothing.
    return remote_class(RolloutWorker).options(**actor_options(
        num_cpus=num_cpus, num_gpus=plan_of(spec).rollout_worker_gpus,
        scheduling_strategy=spread(node))).remote(spec, slot, generation, random_steps)

