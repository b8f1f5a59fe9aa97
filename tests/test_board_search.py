"""The board games' rules on batches and the search over them (envs/board_games.py), and
selfplay_ppo --search_depth (models/selfplay_ppo.py): the batched rules agree with the scalar
ones the scripted player uses on the boards of random games; search values by hand (a win
now, a block, a double threat, Tic-Tac-Toe's draw with best play from every opening); the
model searching only when it acts deterministically; ddrl.load's flag override; errors."""
import gymnasium
import numpy as np
import pytest
import torch

from core.errors import ConfigError
from envs.board_games import (BOARDS, Rules, board_of_spaces, landing_cell, negamax,
                              search_moves, wins)
from tests.test_selfplay import board, selfplay_model

pytestmark = pytest.mark.unit

C4 = "pettingzoo.classic.connect_four_v3"


def flat_planes(obs):
    planes = np.asarray(obs["observation"], bool).reshape(1, -1, 2)
    return planes[..., 0], planes[..., 1]


def zero_value(mine, theirs):
    return np.zeros(len(mine))


def root_values(game, obs, depth, gamma=0.9, leaf_value=zero_value):
    rules = Rules(game)
    mine, theirs = flat_planes(obs)
    values = np.full(rules.actions, -np.inf)
    parent, action, score = negamax(rules, mine, theirs, depth, gamma, leaf_value)
    assert (parent == 0).all()
    values[action] = score
    return values


@pytest.mark.parametrize("game", sorted(BOARDS))
def test_batched_rules_agree_with_the_scalar_rules_on_random_games(game):
    rows, cols, need, _ = BOARDS[game]
    rules = Rules(game)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(40):
        mine, theirs = np.zeros((rows, cols), bool), np.zeros((rows, cols), bool)
        for _ in range(rows * cols):
            occupied = mine | theirs
            legal = rules.legal(occupied.reshape(1, -1))[0]
            if not legal.any():
                break
            landing = rules.landing(occupied.reshape(1, -1))[0]
            for action in np.flatnonzero(legal):
                r, c = landing_cell(game, int(action), occupied)
                assert landing[action] == r * cols + c
                trial = mine.copy()
                trial[r, c] = True
                assert rules.won(trial.reshape(1, -1))[0] == wins(trial, r, c, need)
                checked += 1
            action = int(rng.choice(np.flatnonzero(legal)))
            r, c = landing_cell(game, action, occupied)
            mine[r, c] = True
            if wins(mine, r, c, need):
                break
            mine, theirs = theirs, mine  # the other player's turn
    assert checked > 500


def test_board_games_are_told_by_their_spaces():
    obs = gymnasium.spaces.Dict({
        "observation": gymnasium.spaces.Box(0, 1, (6, 7, 2), np.int8),
        "action_mask": gymnasium.spaces.Box(0, 1, (7,), np.int8)})
    assert board_of_spaces(obs, gymnasium.spaces.Discrete(7)) == "connect_four"
    assert board_of_spaces(obs, gymnasium.spaces.Discrete(42)) is None
    assert board_of_spaces(gymnasium.spaces.Box(0, 1, (4,)), gymnasium.spaces.Discrete(2)) is None


def test_a_win_now_is_worth_gamma_and_outranks_any_leaf_value():
    # bottom row: mine at columns 0-2, column 3 wins now
    obs = board("connect_four", [(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])
    values = root_values("connect_four", obs, 1, leaf_value=lambda m, t: np.full(len(m), -5.0))
    assert values[3] == pytest.approx(0.9)
    # a leaf valued -5 to the opponent (out of range) is clipped to -gamma^2: worth
    # 0.9 * 0.81 to the mover, below the win
    assert np.delete(values, 3) == pytest.approx(0.9 * 0.81)


def test_depth_two_blocks_the_opponents_win():
    # theirs at columns 0-2 of the bottom row: every move but column 3 loses at once
    obs = board("connect_four", [(4, 0), (4, 1), (5, 6)], [(5, 0), (5, 1), (5, 2)])
    values = root_values("connect_four", obs, 2)
    assert values[3] == pytest.approx(0.0)  # the game goes on, leaves valued 0
    assert np.delete(values, 3) == pytest.approx(-0.81)  # the opponent wins next: -gamma^2
    rules = Rules("connect_four")
    mine, theirs = flat_planes(obs)
    prior = np.array([[5.0, 4.0, 3.0, -9.0, 2.0, 1.0, 0.0]])  # the network prefers column 0
    assert search_moves(rules, mine, theirs, 1, 0.9, zero_value, prior)[0] == 0
    assert search_moves(rules, mine, theirs, 2, 0.9, zero_value, prior)[0] == 3


def test_depth_three_finds_a_double_threat():
    # mine at columns 2 and 3 of the bottom row, 0, 1, 5 and 6 free: a piece at 1 or 4 makes
    # an open three that wins next move whatever the opponent blocks
    obs = board("connect_four", [(5, 2), (5, 3)], [(4, 2), (4, 3)])
    values = root_values("connect_four", obs, 3)
    assert values[1] == pytest.approx(0.9 ** 3) and values[4] == pytest.approx(0.9 ** 3)
    assert values[0] < 0.9 ** 3 and values[6] < 0.9 ** 3


def test_every_tictactoe_opening_is_a_draw_with_best_play():
    empty = board("tictactoe", [], [])
    values = root_values("tictactoe", empty, 9, leaf_value=lambda m, t: pytest.fail("a leaf"))
    np.testing.assert_allclose(values, 0.0, atol=1e-12)
    # X in the centre, O on an edge: X wins by force (the edge reply loses)
    edge = board("tictactoe", [(1, 1)], [(0, 1)])
    assert root_values("tictactoe", edge, 7).max() > 0
    # X in the centre, O in a corner: a draw
    corner = board("tictactoe", [(1, 1)], [(0, 0)])
    assert root_values("tictactoe", corner, 7).max() == pytest.approx(0.0)


def test_the_model_searches_only_when_acting_deterministically():
    model, _ = selfplay_model("--search_depth", "2", game=C4)
    obs = board("connect_four", [(4, 0), (4, 1), (5, 6)], [(5, 0), (5, 1), (5, 2)])
    batch = {key: np.stack([value] * 64) for key, value in obs.items()}
    actions, extras = model.choose_actions(batch, deterministic=True)
    assert (np.asarray(actions) == 3).all() and "values" in extras
    # sampling (training's moves, the snapshots' moves) is the network's own: not all blocks
    torch.manual_seed(0)
    sampled, _ = model.choose_actions(batch, deterministic=False)
    assert len(set(np.asarray(sampled).tolist())) > 1


def test_search_errors_are_one_paragraph():
    with pytest.raises(ConfigError, match="--search_depth 2: the search plays by a game's "
                                          "rules, and it knows connect_four, tictactoe"):
        from models.selfplay_ppo import SelfPlayPPOModel
        model, env = selfplay_model()
        SelfPlayPPOModel(model.args.__class__(**{**vars(model.args), "search_depth": 2}),
                         gymnasium.spaces.Dict({
                             "observation": gymnasium.spaces.Box(0, 1, (4, 4, 2), np.int8),
                             "action_mask": gymnasium.spaces.Box(0, 1, (4,), np.int8)}),
                         gymnasium.spaces.Discrete(4))
    with pytest.raises(ConfigError, match="with --normalize_obs"):
        selfplay_model("--search_depth", "2", "--normalize_obs")
    searching, _ = selfplay_model("--search_depth", "2")
    with pytest.raises(ConfigError, match="search_depth=0"):
        searching.export_module()
    plain, _ = selfplay_model()
    assert plain.export_module() is not None
