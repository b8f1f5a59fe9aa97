"""Every seed a run derives from its ``--seed``, in one place.

A run has one seed, ``s``. Each process, env, evaluation and replacement draws its own from it
with the functions below, so that no two consumers share a random stream by accident and a
restored run draws what the uninterrupted one would have. The derivations (exact resume and the
learning tests' fixed figures depend on them staying as they are):

==============================  =================================================================
who                             seed
==============================  =================================================================
driver's torch (PPO learner)    ``s``
rollout worker, slot i,         base ``b = s + 7_919_000 * g`` (a replacement of generation g
replacement generation g        draws other episodes than the worker it replaces):
                                torch and action-space sampling ``b + 1_000 * (i + 1)``,
                                agent ``b + i``, env j ``b + 10_000 * (i + 1) + j``
the learner's own agent         ``s + 999`` (PPO --grad_workers 0)
(PPO --grad_workers 0)
evaluation                      base ``e = s + 1_000_000``: test env k is built with ``e + k``
                                and reset, at the evaluation after env step t, with
                                ``e + k + 1_000 * t``; sampled evaluation actions
                                (--no-eval_deterministic) ``e + 1_000 * t``; --evaluate and
                                --record_video episode k ``e + k``
confirming evaluation           episode j after env step t: ``SeedSequence([s, 1_000_000, t, j])``
(--confirm_episodes)            (its sampled actions: j = the episode count)
an env rebuilt after error n    ``SeedSequence([its seed, n])``: neither the start that failed
                                nor a neighbour's seed
resume at env step t, when a    ``s + 7_919 * t + 100 * i + j`` for env j of worker slot i: a
worker's envs cannot continue   resumed run does not replay its first episodes
parameter server (SAC)          torch and agent ``s``; allreduce replica r: torch ``s + 1_000 r``
learner worker i (SAC)          torch ``s + 100 + i``, agent ``s + i``
replay buffer sampling          ``s``; a --dataset's rows beside the online ones (the mixed
                                buffer of offline-to-online fine-tuning) ``s + 2_000_000``
noisy layers' draws             ``SeedSequence([n, *key])``, n the model's noise seed (drawn
(dqn --exploration noisy)       from its torch stream, kept in its state_dict), key the
                                update's number (the learner) or an acting draw (a fragment)
==============================  =================================================================

Seeds may grow past 2**32 for large step counts; every consumer here takes any non-negative int
(numpy's SeedSequence, torch.manual_seed, gymnasium's reset).
"""
import numpy as np

EVALUATION_OFFSET = 1_000_000  # evaluation envs never share a seed with training envs


def worker_base(seed, generation=0):
    """The base every seed of one rollout-worker process derives from."""
    return seed + 7_919_000 * int(generation)


def worker_torch(seed, slot, generation=0):
    """torch's generator and the action space's sampler in rollout worker ``slot``."""
    return worker_base(seed, generation) + 1_000 * (slot + 1)


def worker_agent(seed, slot, generation=0):
    """The agent's own generator (minibatch shuffling) in rollout worker ``slot``."""
    return worker_base(seed, generation) + slot


def worker_envs(seed, slot, num_envs, generation=0):
    """The constructor and first-reset seeds of the envs of rollout worker ``slot``."""
    base = worker_base(seed, generation) + 10_000 * (slot + 1)
    return [base + j for j in range(num_envs)]


def learner_agent(seed):
    """The agent that computes every gradient in the learner (PPO --grad_workers 0)."""
    return seed + 999


def evaluation_env(seed, k):
    """Test env ``k``'s constructor seed (and --evaluate's and --record_video's episode k)."""
    return seed + EVALUATION_OFFSET + k


def evaluation_episode(seed, k, env_steps):
    """The reset seed of test env ``k`` at the evaluation after ``env_steps``: a function of the
    step count only, so a restored run evaluates as the uninterrupted one."""
    return evaluation_env(seed, k) + 1_000 * int(env_steps)


def evaluation_repeat(seed, i):
    """The run seed of --evaluate --eval_seeds' evaluation ``i``: 0 is the run's own seed (the
    episodes its test worker played), the others are drawn from (seed, i), so that their test
    envs' seeds (seed + EVALUATION_OFFSET + k) share no episode with another repeat's, as
    consecutive seeds would (seed + 1's env k is seed's env k + 1)."""
    if i == 0:
        return seed
    return int(np.random.SeedSequence([int(seed) & (2**64 - 1), int(i)]).generate_state(1)[0])


def confirmation_episode(seed, j, env_steps):
    """The reset seed of episode ``j`` of the confirming evaluation after ``env_steps``
    (--confirm_episodes; ``j == episodes``: its sampled actions' generator): drawn from
    (seed, env_steps, j), so that it is none of the regular evaluations' additive starts."""
    return int(np.random.SeedSequence([int(seed) & (2**64 - 1), EVALUATION_OFFSET,
                                       int(env_steps), int(j)]).generate_state(1)[0])


def evaluation_sampling(seed, env_steps):
    """torch's and the model's acting generator for sampled evaluation actions."""
    return seed + EVALUATION_OFFSET + 1_000 * int(env_steps)


def rebuilt_env(seed, errors):
    """A new seed for an env rebuilt after its ``errors``-th error: derived from its original
    seed and the count, so the rebuilt env neither replays the start that failed nor takes a
    seed of its neighbours (seed + small offsets)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) & (2**64 - 1), int(errors)]).generate_state(1)[0])


def resume_base(seed, env_steps):
    """The base of the fresh episodes a restored run starts when its workers' envs cannot
    continue where they were."""
    return seed + 7_919 * int(env_steps)


def resumed_worker(base, slot):
    """The first fresh-episode seed of worker ``slot`` (env j adds j) from ``resume_base``."""
    return base + 100 * slot


def server_torch(seed, rank=0):
    """The parameter server's torch generator (rank 0), or an allreduce replica's."""
    return seed + 1_000 * int(rank)


def learner_worker_torch(seed, index):
    return seed + 100 + index


def learner_worker_agent(seed, index):
    return seed + index


def dataset_sampling(seed):
    """The sampler of a --dataset's rows kept beside the online replay (their own stream)."""
    return seed + 2_000_000


def dataset_shard(seed, index):
    """The sampler of a learner's shard of a --dataset (--shard_dataset), one stream each."""
    return seed + 3_000_000 + 1_000 * int(index)


def noise_draw(noise_seed, *key):
    """The seed of one draw of a model's noisy layers (models/noisy.py keyed_generator)."""
    state = np.random.SeedSequence([int(noise_seed), *(int(k) for k in key)]).generate_state(
        1, np.uint64)
    return int(state[0]) % (2 ** 63)
