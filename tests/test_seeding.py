"""core/seeding.py: every seed a run derives, against hand-computed values (exact resume and
the learning tests' fixed figures depend on them), and no seed arithmetic outside it."""
import os
import re

import pytest

from core import seeding

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rollout_worker_seeds_by_hand():
    # base = s + 7_919_000 * generation
    assert seeding.worker_base(3) == 3
    assert seeding.worker_base(3, generation=2) == 3 + 15_838_000
    assert seeding.worker_torch(3, slot=1) == 3 + 2_000
    assert seeding.worker_agent(3, slot=1) == 4
    assert seeding.worker_envs(3, slot=1, num_envs=2) == [20_003, 20_004]
    assert seeding.worker_envs(3, slot=0, num_envs=2, generation=1) == [7_929_003, 7_929_004]


def test_evaluation_and_resume_seeds_by_hand():
    assert seeding.evaluation_env(2, k=3) == 1_000_005
    assert seeding.evaluation_episode(2, k=3, env_steps=4_096) == 1_000_005 + 4_096_000
    assert seeding.evaluation_sampling(2, env_steps=10) == 1_010_002
    assert seeding.resume_base(2, env_steps=100) == 2 + 791_900
    assert seeding.resumed_worker(50, slot=3) == 350
    assert seeding.learner_agent(1) == 1_000
    assert seeding.server_torch(1) == 1 and seeding.server_torch(1, rank=2) == 2_001
    assert seeding.learner_worker_torch(1, 2) == 103 and seeding.learner_worker_agent(1, 2) == 3


def test_workers_envs_and_replacements_never_share_a_seed():
    seeds = [s for g in range(3) for w in range(8)
             for s in seeding.worker_envs(0, w, 16, generation=g)]
    assert len(set(seeds)) == len(seeds)
    evaluation = {seeding.evaluation_env(0, k) for k in range(16)}
    assert not evaluation & set(seeds)


def test_a_rebuilt_env_gets_a_seed_of_neither_its_start_nor_a_neighbour():
    new = seeding.rebuilt_env(10_000, 1)
    assert new == seeding.rebuilt_env(10_000, 1)           # a function of seed and count
    assert new not in range(9_000, 11_000)
    assert seeding.rebuilt_env(10_000, 2) != new
    assert seeding.rebuilt_env(None, 1) is None


def test_no_seed_arithmetic_outside_the_seeding_module():
    """A seed derived by hand somewhere else is how two consumers came to share a stream."""
    pattern = re.compile(r"seed\)?\s*[+*]\s*[0-9(]|[0-9_]+\s*\*\s*\(?(slot|worker_index|rank)\b")
    found = []
    for folder in ("core", "models", "agents", "envs", "options"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(dirpath, name)
                if not name.endswith(".py") or path.endswith(os.path.join("core", "seeding.py")):
                    continue
                with open(path) as f:
                    for number, line in enumerate(f, 1):
                        if pattern.search(line.split("#")[0]):
                            found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert not found, "seeds derived outside core/seeding.py:\n" + "\n".join(found)


def test_eval_seeds_repeats_share_no_episode():
    """--evaluate --eval_seeds: repeat 0 is the run's own evaluation; no two repeats play an
    episode in common (consecutive run seeds would: seed + 1's env k is seed's env k + 1)."""
    assert seeding.evaluation_repeat(7, 0) == 7
    episodes = [{seeding.evaluation_episode(seeding.evaluation_repeat(7, i), k, 5_000)
                 for k in range(100)} for i in range(5)]
    assert all(len(a & b) == 0 for n, a in enumerate(episodes) for b in episodes[n + 1:])
    assert seeding.evaluation_repeat(7, 1) == seeding.evaluation_repeat(7, 1)   # reproducible
