"""Turn-based games and self-play (envs/pettingzoo_aec.py, models/selfplay_ppo.py): the scripted
player's moves on hand-made boards, AEC turn order with masks, illegal moves, the snapshot pool
(snapshots, replacement, the opponents' weights), Elo by hand, opponent sampling, errors, and a
whole run (train with the pool in metrics.csv, resume, evaluate against the scripted player)."""
import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from envs.pettingzoo_aec import PettingZooTurnEnv, scripted_move

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.unit


def game_env(evaluation=False, **flags):
    args = argparse.Namespace(pz_env="pettingzoo.classic.tictactoe_v3", pz_kwargs="{}",
                              opponent="random", eval_opponent="random", seat="random",
                              evaluation=evaluation, both_seats=False, render_mode=None,
                              fixed_opponents="")
    vars(args).update(flags)
    return PettingZooTurnEnv(args, seed=0)


def board(game, mine, theirs):
    rows, cols = (6, 7) if game == "connect_four" else (3, 3)
    planes = np.zeros((rows, cols, 2), np.int8)
    for r, c in mine:
        planes[r, c, 0] = 1
    for r, c in theirs:
        planes[r, c, 1] = 1
    if game == "connect_four":
        mask = (planes[0].sum(-1) == 0).astype(np.int8)
    else:  # action a is the cell [a // 3, a % 3]
        mask = (planes.sum(-1).reshape(-1) == 0).astype(np.int8)
    return {"observation": planes, "action_mask": mask}


def test_the_scripted_player_wins_then_blocks():
    rng = np.random.default_rng(0)
    # Connect Four, bottom row: mine at columns 0-2 -> column 3 wins; theirs too at 4-6 -> still
    # mine first (win before block)
    obs = board("connect_four", [(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])
    assert scripted_move("connect_four", obs, rng) == 3
    # theirs three high in column 6: block on top of them (row 2)
    obs = board("connect_four", [(5, 0), (5, 1)], [(5, 6), (4, 6), (3, 6)])
    assert scripted_move("connect_four", obs, rng) == 6
    # a diagonal of theirs whose last cell rests on a column of three: block column 3
    obs = board("connect_four", [(5, 3), (4, 3), (3, 3), (5, 1), (5, 2)],
                [(5, 0), (4, 1), (3, 2), (4, 2)])
    assert scripted_move("connect_four", obs, rng) == 3
    # Tic-Tac-Toe: mine on cells 0 and 4 -> 8 wins; then theirs on 2 and 5 -> block 8
    obs = board("tictactoe", [(0, 0), (1, 1)], [(0, 1), (0, 2)])
    assert scripted_move("tictactoe", obs, rng) == 8
    obs = board("tictactoe", [(0, 0), (2, 1)], [(0, 2), (1, 2)])
    assert scripted_move("tictactoe", obs, rng) == 8
    # nothing to win or block: a legal move (the centre column half of the time)
    obs = board("connect_four", [], [])
    moves = [scripted_move("connect_four", obs, rng) for _ in range(200)]
    assert set(moves) <= set(range(7)) and 0.4 < np.mean(np.array(moves) == 3) < 0.75


def test_the_opportunist_wins_when_it_can_and_otherwise_ignores_threats():
    rng = np.random.default_rng(0)
    # mine on 0 and 4 -> 8 wins, as the scripted player
    obs = board("tictactoe", [(0, 0), (1, 1)], [(0, 1), (0, 2)])
    assert scripted_move("tictactoe", obs, rng, block=False) == 8
    # theirs on 2 and 5 threaten 8: the scripted player blocks every time, the opportunist
    # moves uniformly over the 5 free cells
    obs = board("tictactoe", [(0, 0), (2, 1)], [(0, 2), (1, 2)])
    moves = np.array([scripted_move("tictactoe", obs, rng, block=False) for _ in range(500)])
    assert set(moves) == {1, 3, 4, 6, 8}
    assert np.mean(moves == 8) == pytest.approx(0.2, abs=0.06)  # 3 standard deviations
    # Connect Four: no centre preference either
    obs = board("connect_four", [], [])
    moves = np.array([scripted_move("connect_four", obs, rng, block=False) for _ in range(700)])
    assert np.mean(moves == 3) == pytest.approx(1 / 7, abs=0.04)


def test_the_opportunist_plays_in_training_and_evaluations():
    from envs.pettingzoo_aec import _parse_shares
    assert _parse_shares("opportunist=0.2,random=0.1") == {"opportunist": 0.2, "random": 0.1}
    env = game_env(opponent="opportunist", seat="player_2")
    obs, _ = env.reset(seed=0)
    assert env.kinds == {"player_1": "opportunist"}
    assert obs["action_mask"].sum() == 8  # it opened the game
    with pytest.raises(ConfigError, match="opportunist"):
        _parse_shares("opportunist=0.7,scripted=0.7")


def test_turn_order_masks_and_the_outcome():
    """The learner is asked to move only on its turn, with the game's mask; the opponent has
    moved first when the learner's seat is the second; the reward is the learner's and the
    last info scores the game."""
    env = game_env()
    rng = np.random.default_rng(1)
    seats, outcomes = set(), []
    for episode in range(40):
        obs, _ = env.reset(seed=episode)
        seats.add(env.learner)
        assert env.env.agent_selection == env.learner
        pieces = obs["observation"].sum(axis=(0, 1))
        # own pieces first: the second seat starts with one opposing piece on the board
        assert tuple(pieces) == ((0, 0) if env.learner == env.agents[0] else (0, 1))
        done, total = False, 0.0
        while not done:
            assert env.env.agent_selection == env.learner
            legal = np.flatnonzero(obs["action_mask"])
            before = obs["observation"].sum()
            obs, reward, terminated, truncated, info = env.step(int(rng.choice(legal)))
            total += reward
            done = terminated or truncated
            if not done:  # mine and one of theirs more
                assert obs["observation"].sum() == before + 2
        scored = info["episode_metrics"]
        assert scored["illegal"] == 0
        # the one opponent: a fixed player (slot -1), the learner's score the game's outcome
        assert scored["opponents"] == [[-1.0, -1.0, 1.0 if total > 0 else 0.5 if total == 0
                                        else 0.0]]
        assert scored["win"] == float(total > 0) and scored["loss"] == float(total < 0)
        assert scored["draw"] == float(total == 0) and info["is_success"] == (total > 0)
        outcomes.append(total)
    assert seats == {"player_1", "player_2"}
    assert {-1.0, 1.0} <= set(outcomes)


def test_fixed_opponents_take_their_share_of_self_plays_games_and_move_as_they_do():
    from envs.pettingzoo_aec import _parse_shares

    class Pool:  # the model a rollout worker hands the env: a snapshot for every other game
        def sample_opponent(self, rng):
            return (0, 0.0)

        def opponent_actions(self, slot, batch):
            return np.array([int(np.flatnonzero(batch["action_mask"][0])[0])])
    env = game_env(opponent="selfplay", fixed_opponents="random=0.25,scripted=0.25")
    env.bind_policy(lambda: Pool())
    kinds = []
    env.reset(seed=0)
    for _ in range(2000):  # one stream of draws (seeded: the same figures every time)
        env.reset()
        kinds += list(env.kinds.values())
        (agent,) = env.opponents
        assert env.opponents[agent] == ((0, 0.0) if env.kinds[agent] == "selfplay"
                                         else (-1, -1))  # a fixed player is not rated
    shares = {k: kinds.count(k) / len(kinds) for k in ("random", "scripted", "selfplay")}
    assert shares == pytest.approx({"random": 0.25, "scripted": 0.25, "selfplay": 0.5},
                                   abs=0.035)  # 3 standard deviations of 2,000 draws
    # all fixed: the scripted player opens the game (as scripted_move plays, the centre)
    env = game_env(opponent="selfplay", fixed_opponents="scripted=1", seat="player_2")
    env.bind_policy(lambda: Pool())
    obs, _ = env.reset(seed=0)
    assert env.kinds == {"player_1": "scripted"}
    assert obs["observation"][..., 1].sum() == 1 and obs["observation"][1, 1, 1] == 1
    assert _parse_shares("none") == {} and _parse_shares("random=1") == {"random": 1.0}
    for bad in ("random=0.7,scripted=0.7", "selfplay=0.1", "random", "random=x"):
        with pytest.raises(ConfigError, match="--fixed_opponents"):
            _parse_shares(bad)
    # evaluations meet --eval_opponent alone
    assert game_env(evaluation=True, opponent="selfplay",
                    fixed_opponents="random=0.5").fixed_shares == {}


def test_an_illegal_move_ends_the_game_and_is_counted():
    env = game_env(seat="player_1")
    obs, _ = env.reset(seed=0)
    obs, _, _, _, _ = env.step(4)
    taken = int(np.flatnonzero(obs["observation"].reshape(-1, 2)[:, 1])[0])
    *_, terminated, truncated, info = env.step(taken)
    assert terminated and info["episode_metrics"]["illegal"] == 1
    assert info["episode_metrics"]["loss"] == 1


def selfplay_model(*flags, game="pettingzoo.classic.tictactoe_v3"):
    from models.selfplay_ppo import SelfPlayPPOModel
    from options.options import parse_args
    args = parse_args(["--config", "none", "--env_name", "pettingzoo_aec", "--pz_env", game,
                       "--model_name", "selfplay_ppo", "--num_workers", "0", *flags])
    env = game_env(pz_env=game)
    torch.manual_seed(0)
    return SelfPlayPPOModel(args, env.observation_space, env.action_space), env


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_the_pool_snapshots_every_n_updates_and_replaces_the_oldest():
    model, env = selfplay_model("--selfplay_pool", "3", "--snapshot_every", "2")
    assert model.pool_stamp.tolist() == [0, -1, -1]
    torch.testing.assert_close(model.pool[0], flat(model))
    stamps = []
    for update in range(1, 9):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        model.after_update()
        stamps.append(model.pool_stamp.tolist())
        if update % 2 == 0:  # the newest snapshot is the parameters of this update
            slot = (update // 2) % 3
            torch.testing.assert_close(model.pool[slot], flat(model))
    # snapshots at updates 2, 4 fill the pool; 6 replaces the initial one, 8 the one of 2
    assert stamps[1] == [0, 2, -1] and stamps[3] == [0, 2, 4]
    assert stamps[5] == [6, 2, 4] and stamps[7] == [6, 8, 4]


def test_an_opponent_acts_with_its_snapshot_not_the_learner():
    model, env = selfplay_model("--selfplay_pool", "2")
    obs, _ = env.reset(seed=0)
    batch = {"observation": obs["observation"][None], "action_mask": obs["action_mask"][None]}
    model.opponent_actions(0, batch)
    opponent = model.opponent_cache[0][1]
    torch.testing.assert_close(flat(opponent), model.pool[0])
    with torch.no_grad():  # the learner moves on; the frozen snapshot does not
        for p in model.parameters():
            p.add_(1.0)
    model.opponent_actions(0, batch)
    torch.testing.assert_close(flat(model.opponent_cache[0][1]), model.pool[0])
    # a masked cell is never chosen by an opponent either
    batch["action_mask"] = np.zeros((1, 9), np.int8)
    batch["action_mask"][0, 7] = 1
    assert {int(model.opponent_actions(0, batch)[0]) for _ in range(20)} == {7}
    # the pool reaches a worker's model with the weights
    other, _ = selfplay_model("--selfplay_pool", "2")
    model.snapshot()
    other.set_weights(model.get_weights())
    torch.testing.assert_close(other.pool, model.pool)
    assert other.pool_stamp.tolist() == model.pool_stamp.tolist()


def test_elo_and_the_win_rates_by_hand():
    model, _ = selfplay_model("--selfplay_pool", "2", "--elo_k", "16")
    game = {"win": 1.0, "draw": 0.0, "loss": 0.0, "illegal": 0.0,
            "opponents": [[0.0, 0.0, 1.0]]}  # slot, stamp, score
    row = model.observe_episodes([game])
    # equal ratings: expected score 0.5; a win moves each by 16 * 0.5
    assert float(model.rating) == pytest.approx(1008.0)
    assert float(model.pool_rating[0]) == pytest.approx(992.0)
    assert float(model.pool_score[0]) == pytest.approx(0.55)
    assert row["win_rate"] == 1.0 and row["pool_size"] == 1 and row["pool_elo"] == "992"
    # a draw against it now: expected 1 / (1 + 10^(-16/400))
    expected = 1.0 / (1.0 + 10.0 ** ((992.0 - 1008.0) / 400.0))
    row = model.observe_episodes([dict(game, win=0.0, draw=1.0, opponents=[[0.0, 0.0, 0.5]])])
    assert float(model.rating) == pytest.approx(1008.0 + 16.0 * (0.5 - expected))
    assert row["draw_rate"] == 1.0 and row["illegal_moves"] == 0
    # a game against a snapshot since replaced (another stamp) is not rated
    rating = float(model.rating)
    model.observe_episodes([dict(game, opponents=[[0.0, 5.0, 1.0]])])
    assert float(model.rating) == rating


def test_elo_against_several_opponents_is_pairwise_by_hand():
    """Three players: the learner beat the snapshot in slot 0 and lost to the one in slot 1;
    each pairing moves the ratings by K / 2."""
    model, _ = selfplay_model("--selfplay_pool", "2", "--elo_k", "16")
    model.snapshot()  # slot 1, rated 1000 as well
    model.observe_episodes([{"win": 0.0, "draw": 0.0, "loss": 1.0, "illegal": 0.0,
                             "opponents": [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]}])
    first = 8.0 * (1.0 - 0.5)                                        # against slot 0: +4
    expected = 1.0 / (1.0 + 10.0 ** ((1000.0 - (1000.0 + first)) / 400.0))
    second = 8.0 * (0.0 - expected)                                  # against slot 1
    assert float(model.rating) == pytest.approx(1000.0 + first + second)
    assert float(model.pool_rating[0]) == pytest.approx(1000.0 - first)
    assert float(model.pool_rating[1]) == pytest.approx(1000.0 - second)


def test_a_three_player_game_draws_an_opponent_per_seat_and_scores_each():
    model, _ = selfplay_model("--selfplay_pool", "3", game="tests.plugins.race_game")
    model.snapshot()
    model.snapshot()
    env = game_env(pz_env="tests.plugins.race_game", pz_kwargs='{"players": 3}',
                   opponent="selfplay", seat="player_1")
    env.bind_policy(lambda: model)
    obs, _ = env.reset(seed=3)
    assert len(env.opponents) == 2 and env.env.agent_selection == "player_1"
    assert obs["observation"][0] == 0  # player_0 moved first: the count is 1 or 2
    done, info = False, {}
    while not done:
        obs, reward, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    scores = info["episode_metrics"]["opponents"]
    assert [row[:2] for row in scores] == [list(map(float, env.opponents[a]))
                                           for a in ("player_0", "player_2")]
    # one seat won (+1) and the others lost (-1): the learner scores 1 against both or
    # 0.5 against the other loser and 0 against the winner
    got = sorted(row[2] for row in scores)
    assert got in ([1.0, 1.0], [0.0, 0.5]) and (got == [1.0, 1.0]) == (reward == 1.0)


def test_hard_sampling_favours_the_snapshots_the_learner_loses_to():
    model, _ = selfplay_model("--selfplay_pool", "2", "--opponent_sampling", "hard")
    model.snapshot()
    model.pool_score[:] = torch.tensor([1.0, 0.0])  # always beats 0, always loses to 1
    rng = np.random.default_rng(0)
    slots = [model.sample_opponent(rng)[0] for _ in range(2000)]
    # weights 0.05 and 1.05
    assert np.mean(np.array(slots) == 1) == pytest.approx(1.05 / 1.10, abs=0.02)


def test_latest_games_meet_the_learning_policy_itself_unrated():
    from models.selfplay_ppo import LATEST
    model, env = selfplay_model("--selfplay_latest", "1.0")
    rng = np.random.default_rng(0)
    assert model.sample_opponent(rng) == (LATEST, float(LATEST))
    obs, _ = env.reset(seed=0)
    batch = {"observation": obs["observation"][None], "action_mask": obs["action_mask"][None]}
    batch["action_mask"] = np.zeros((1, 9), np.int8)
    batch["action_mask"][0, 4] = 1
    assert int(model.opponent_actions(LATEST, batch)[0]) == 4
    assert LATEST not in model.opponent_cache  # no frozen copy: the model as it acts now
    rating = float(model.rating)
    row = model.observe_episodes([{"win": 1.0, "draw": 0.0, "loss": 0.0, "illegal": 0.0,
                                   "opponents": [[float(LATEST), float(LATEST), 1.0]]}])
    assert float(model.rating) == rating and row["win_rate"] == 1.0
    half, _ = selfplay_model("--selfplay_latest", "0.5")
    drawn = [half.sample_opponent(rng)[0] for _ in range(1000)]
    assert np.mean(np.array(drawn) == LATEST) == pytest.approx(0.5, abs=0.05)


def test_errors_are_one_paragraph():
    with pytest.raises(ConfigError, match="knows connect_four, tictactoe only"):
        game_env(pz_env="pettingzoo.classic.rps_v2", opponent="scripted")
    with pytest.raises(ConfigError, match="--seat 'north'"):
        game_env(seat="north")
    with pytest.raises(ConfigError, match="no env\\(\\) function"):
        game_env(pz_env="json")
    env = game_env(opponent="selfplay")  # no model handed to it: outside a rollout worker
    with pytest.raises(ConfigError, match="--model_name selfplay_ppo"):
        env.reset(seed=0)
    env.bind_policy(lambda: torch.nn.Linear(1, 1))  # a model without a pool
    with pytest.raises(ConfigError, match="--model_name selfplay_ppo"):
        env.reset(seed=0)


def test_both_seats_games_against_itself_alternate_the_mover():
    """--both_seats: in a game against the learning policy itself each step is one move of
    whoever is to move, seen from that player's side; the reward is that move's; next_sign is
    -1 (the opponent moves next); a game against a snapshot is as before (+1)."""
    model, _ = selfplay_model("--selfplay_latest", "1.0")
    env = game_env(opponent="selfplay", both_seats=True)
    env.bind_policy(lambda: model)
    obs, _ = env.reset(seed=0)
    assert env.mover == env.agents[0] and obs["observation"].sum() == 0
    # X: 0, O: 3, X: 1, O: 4, X: 2 wins (the top row)
    for k, move in enumerate([0, 3, 1, 4, 2]):
        mover = env.mover
        obs, reward, terminated, truncated, info = env.step(move)
        assert info["step_report"]["next_sign"] == -1.0
        if k < 4:
            assert reward == 0 and not terminated and env.mover != mover
            # the next mover's side: its own pieces first, the opponent's k + 1 - k // 2
            mine, theirs = obs["observation"].reshape(-1, 2).sum(axis=0)
            assert (mine, theirs) == ((k + 1) // 2, k // 2 + 1)
    assert reward == 1.0 and terminated                     # the mover's reward: it won
    scored = info["episode_metrics"]                        # from the learner's drawn seat
    assert scored["opponents"][0][0] == -2 and scored["win"] == float(env.learner == env.agents[0])
    pool, _ = selfplay_model("--selfplay_latest", "0.0")    # a snapshot: the learner's seat only
    env.bind_policy(lambda: pool)
    env.reset(seed=1)
    assert env.mover is None
    info = env.step(int(np.flatnonzero(env.env.observe(env.learner)["action_mask"])[0]))[-1]
    assert info["step_report"]["next_sign"] == 1.0
    with pytest.raises(ConfigError, match="--both_seats"):
        game_env(opponent="random", both_seats=True)
    assert game_env(opponent="selfplay", both_seats=True, evaluation=True).both_seats is False


def test_the_tactics_count_tells_a_player_that_sees_fours_from_one_that_does_not():
    """benchmarks/selfplay_games.py tactics: the scripted player (win now, else block) takes
    every win in one and every needed block; the first legal move does not."""
    import types
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from selfplay_games import tactics
    spec = types.SimpleNamespace(env=types.SimpleNamespace(
        pz_env="pettingzoo.classic.connect_four_v3"))
    rng = np.random.default_rng(0)
    sharp = types.SimpleNamespace(spec=spec, act=lambda obs: scripted_move("connect_four", obs,
                                                                           rng))
    first = types.SimpleNamespace(spec=spec,
                                  act=lambda obs: int(np.flatnonzero(obs["action_mask"])[0]))
    seen = tactics(sharp, positions=60)
    assert seen["win"] == {"positions": 60, "taken": 1.0} and seen["block"]["taken"] == 1.0
    blind = tactics(first, positions=60)
    assert blind["win"]["taken"] < 0.5 and blind["block"]["taken"] < 0.5


def test_negamax_gae_by_hand():
    """next_sign -1: the next state's value is the opponent's, negated for this step's mover,
    and so is the advantage flowing back from it."""
    from agents.default_agent import compute_gae
    # X moves at t=0 (V .2), O at t=1 (V .5) and wins (+1); gamma .9, lambda 1
    # t=1: A = 1 - .5 = .5;  t=0: delta = 0 + .9 * (-.5) - .2 = -.65, A = -.65 - .9 * .5 = -1.1
    # (X's return: -.9, the loss one move later, discounted)
    advantages, returns = compute_gae([[0.0], [1.0]], np.array([[0.2], [0.5]]),
                                      np.array([[0.5], [0.0]]), [[False], [True]],
                                      [[False], [False]], 0.9, 1.0,
                                      next_sign=[[-1.0], [-1.0]])
    np.testing.assert_allclose(advantages[:, 0], [-1.1, 0.5], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [-0.9, 1.0], rtol=1e-6)
    same, _ = compute_gae([[0.0], [1.0]], np.array([[0.2], [0.5]]), np.array([[0.5], [0.0]]),
                          [[False], [True]], [[False], [False]], 0.9, 1.0,
                          next_sign=[[1.0], [1.0]])
    plain, _ = compute_gae([[0.0], [1.0]], np.array([[0.2], [0.5]]), np.array([[0.5], [0.0]]),
                           [[False], [True]], [[False], [False]], 0.9, 1.0)
    np.testing.assert_array_equal(same, plain)               # +1 everywhere: plain GAE


@pytest.mark.e2e
def test_selfplay_trains_resumes_and_evaluates(tmp_path):
    """Tic-Tac-Toe against the pool and, half of the games, against itself from both seats,
    for a few rounds: metrics.csv has the rates, the ratings and a pool that grew, no illegal
    move; a resumed run starts from the saved pool; --evaluate
    plays the scripted player."""
    run_dir = str(tmp_path / "ttt")
    common = [sys.executable, "main.py", "--env_name", "pettingzoo_aec", "--pz_env",
              "pettingzoo.classic.tictactoe_v3", "--model_name", "selfplay_ppo",
              "--num_workers", "0", "--quiet", "--no-tensorboard", "--target_return", "none",
              "--num_envs_per_worker", "8", "--rollout_steps", "16", "--batch_size", "64",
              "--snapshot_every", "4", "--selfplay_pool", "3", "--eval_interval", "1024",
              "--eval_episodes", "4", "--selfplay_latest", "0.5", "--both_seats"]
    train = subprocess.run([*common, "--total_steps", "1536", "--run_dir", run_dir], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    from core.run.metrics import read_metrics
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    assert all(row["illegal_moves"] == 0 for row in rows if row["win_rate"] is not None)
    assert rows[-1]["pool_size"] == 3 and len(str(rows[-1]["pool_elo"]).split()) == 3
    assert all(0 <= row["win_rate"] + row["draw_rate"] <= 1 for row in rows
               if row["win_rate"] is not None)
    resumed = subprocess.run([sys.executable, "main.py", "--restore", run_dir,
                              "--total_steps", "2048", "--quiet", "--no-tensorboard"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = read_metrics(os.path.join(run_dir, "metrics.csv"))
    assert len(after) > len(rows) and after[-1]["pool_size"] == 3
    # the pool's clock went on from the saved one: it counts every update of both runs
    saved = torch.load(os.path.join(run_dir, "checkpoints", "last.pt"), weights_only=True)
    assert float(saved["model"]["updates_done"]) == after[-1]["updates"] > rows[-1]["updates"]
    assert float(saved["model"]["pool_stamp"].max()) > rows[-1]["updates"] - 4
    evaluate = subprocess.run([sys.executable, "main.py", "--evaluate", run_dir,
                               "--eval_episodes", "6", "--eval_opponent", "scripted"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "6 deterministic episodes" in evaluate.stdout
    # acting flags given to ddrl.load override the run's: its moves searched two deep
    import ddrl
    searching = ddrl.load(run_dir, search_depth=2)
    assert searching.model.args.search_depth == 2 and ddrl.load(run_dir).model.search_rules is None
    env = searching.make_env()
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"][int(searching.act(obs))] == 1


@pytest.mark.e2e
def test_a_three_player_game_trains_by_selfplay_and_rates_the_pool(tmp_path):
    """Self-play with more than two players: each other seat a snapshot of its own, the
    learner rated against each (its Elo and the pool's move from the start)."""
    run_dir = str(tmp_path / "race")
    train = subprocess.run([sys.executable, "main.py", "--env_name", "pettingzoo_aec",
                            "--pz_env", "tests.plugins.race_game", "--pz_kwargs",
                            '{"players": 3}', "--model_name", "selfplay_ppo", "--num_workers",
                            "0", "--quiet", "--no-tensorboard", "--target_return", "none",
                            "--num_envs_per_worker", "8", "--rollout_steps", "16",
                            "--batch_size", "64", "--snapshot_every", "40", "--selfplay_pool",
                            "3", "--eval_interval", "1024", "--eval_episodes", "4",
                            "--total_steps", "3000", "--run_dir", run_dir],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    from core.run.metrics import read_metrics
    rows = [r for r in read_metrics(os.path.join(run_dir, "metrics.csv"))
            if r["win_rate"] is not None]
    assert all(row["illegal_moves"] == 0 for row in rows)
    assert rows[-1]["pool_size"] == 3 and rows[-1]["elo"] != 1000.0
    assert any(float(r) != 1000.0 for r in str(rows[-1]["pool_elo"]).split())
