"""Games of trained self-play policies (models/selfplay_ppo.py on envs/pettingzoo_aec.py) against
fixed players: the random player and the scripted one (win now, else block, else a legal move
near the centre), half of the games in each seat, the policy acting deterministically through
``ddrl.load`` (what a user gets). Counts wins, draws, losses, illegal moves (an action the
game's mask forbids, checked before the game sees it), and for the board games the scripted
player knows, the policy's tactical misses: moves where it had a winning move and played
another ("missed wins"), and moves where the opponent threatened to win next at a cell the
policy could fill, it had no win of its own, and it did not block ("missed blocks").

    .venv/bin/python benchmarks/selfplay_games.py RUN_DIR [RUN_DIR ...] --games 200 \\
        --out benchmarks/results/connect-four-selfplay.json

Prints a row per run and opponent: win rate with its 95% Wilson interval, draws, losses,
illegal moves, and the win rate in each seat; and per run its tactical sight away from its own
games (``tactics``: positions of random games where a win in one, or a needed block, exists;
the share the policy's move takes).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ddrl
from core.plugins import make_env
from envs.board_games import BOARDS, board_game, landing_cell, wins


def winning_moves(game, observation, plane):
    """The legal moves that complete a line for the pieces of ``plane`` (0: the player to
    move, 1: its opponent) in the Classic observation."""
    rows, cols, need, _ = BOARDS[game]
    planes = np.asarray(observation["observation"], bool).reshape(rows, cols, 2)
    occupied = planes[..., 0] | planes[..., 1]
    found = []
    for action in np.flatnonzero(np.asarray(observation["action_mask"])):
        r, c = landing_cell(game, int(action), occupied)
        trial = planes[..., plane].copy()
        trial[r, c] = True
        if wins(trial, r, c, need):
            found.append(int(action))
    return found


def wilson(wins, games, z=1.96):
    """95% Wilson score interval of a rate."""
    if games == 0:
        return (float("nan"), float("nan"))
    p = wins / games
    centre = (p + z * z / (2 * games)) / (1 + z * z / games)
    half = z * math.sqrt(p * (1 - p) / games + z * z / (4 * games * games)) / (1 + z * z / games)
    return (centre - half, centre + half)


def play(policy, opponent, games, seed=0):
    """``games`` games against ``opponent`` (random or scripted), seats alternating; the
    counts."""
    agents = make_env(policy.plugins, policy.spec.env, seed=seed, evaluation=True).agents
    known = board_game(policy.spec.env.pz_env)
    board = known[0] if known else None
    counts = {"games": 0, "win": 0, "draw": 0, "loss": 0, "illegal": 0, "moves": 0,
              "missed_wins": 0, "missed_blocks": 0,
              "win_by_seat": {agent: 0 for agent in agents},
              "games_by_seat": {agent: 0 for agent in agents}}
    envs = {agent: make_env(policy.plugins,
                            policy.spec.env.replace(eval_opponent=opponent, seat=agent),
                            seed=seed + k, evaluation=True)
            for k, agent in enumerate(agents)}
    for game in range(games):
        seat = agents[game % len(agents)]
        env = envs[seat]
        obs, _ = env.reset(seed=seed * 100_000 + game)
        done = False
        while not done:
            action = int(policy.act(obs))
            if not obs["action_mask"][action]:
                counts["illegal"] += 1
            counts["moves"] += 1
            if board is not None:
                wins = winning_moves(board, obs, 0)
                if wins and action not in wins:
                    counts["missed_wins"] += 1
                elif not wins:
                    blocks = winning_moves(board, obs, 1)
                    if blocks and action not in blocks:
                        counts["missed_blocks"] += 1
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        scored = info["episode_metrics"]
        for key in ("win", "draw", "loss"):
            counts[key] += int(scored[key])
        counts["games"] += 1
        counts["games_by_seat"][seat] += 1
        counts["win_by_seat"][seat] += int(scored["win"])
    env.close()
    return counts


def tactics(policy, positions=500, seed=0):
    """The policy's tactical sight away from its own games: positions met in games of random
    moves (seeded) where the player to move can win at once ("win"), or cannot but must block
    its opponent's win ("block"), up to ``positions`` of each; the share where the policy's
    deterministic move is one that wins (blocks). A player that sees a line of four takes
    nearly all; picking among the legal moves at random takes about 1 in 5 (1 in 7 to 1 in
    3, by how many are legal)."""
    import importlib
    known = board_game(policy.spec.env.pz_env)
    if known is None:
        return None
    board = known[0]
    game = importlib.import_module(policy.spec.env.pz_env).env()
    rng = np.random.default_rng(seed)
    found = {"win": [], "block": []}
    episode = 0
    while min(len(v) for v in found.values()) < positions and episode < 50 * positions:
        game.reset(seed=seed + episode)
        episode += 1
        while not any(game.terminations.values()) and not any(game.truncations.values()):
            obs = game.observe(game.agent_selection)
            wins, blocks = winning_moves(board, obs, 0), winning_moves(board, obs, 1)
            if wins and len(found["win"]) < positions:
                found["win"].append((obs, wins))
            elif blocks and not wins and len(found["block"]) < positions:
                found["block"].append((obs, blocks))
            game.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    game.close()
    return {kind: {"positions": len(cases),
                   "taken": float(np.mean([int(policy.act(obs)) in moves
                                           for obs, moves in cases])) if cases else None}
            for kind, cases in found.items()}


class UntrainedSearch:
    """The control for --search_depth: the same search with nothing learned in it (every
    leaf valued 0, ties broken at random), acting in the run's game; what a policy's search
    wins beyond this is the learned value's and policy's."""

    def __init__(self, policy, depth, seed=0):
        from envs.board_games import Rules
        self.spec, self.plugins = policy.spec, policy.plugins
        self.rules = Rules(board_game(policy.spec.env.pz_env)[0])
        self.depth, self.rng = depth, np.random.default_rng(seed)

    def act(self, obs):
        from envs.board_games import search_moves
        planes = np.asarray(obs["observation"], bool).reshape(1, -1, 2)
        prior = self.rng.random((1, self.rules.actions))
        return search_moves(self.rules, planes[..., 0], planes[..., 1], self.depth, 0.9,
                            lambda mine, theirs: np.zeros(len(mine)), prior)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (or checkpoints)")
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--opponents", nargs="+", default=["random", "scripted"])
    parser.add_argument("--seed", type=int, default=12345,
                        help="seeds the games (not any run's seed)")
    parser.add_argument("--positions", type=int, default=500,
                        help="positions of each kind for the tactics count (0: none)")
    parser.add_argument("--search_depth", type=int, default=None,
                        help="selfplay_ppo's search at decision time, this many moves deep "
                             "(default: the run's own --search_depth)")
    parser.add_argument("--untrained_search", type=int, default=None, metavar="DEPTH",
                        help="play the control instead of each run's policy: the search this "
                             "many moves deep with every leaf valued 0 and random tie-breaks "
                             "(the run only names the game)")
    parser.add_argument("--out", default=None, help="JSON file for the counts")
    args = parser.parse_args()
    flags = {} if args.search_depth is None else {"search_depth": args.search_depth}
    results = []
    for run in args.runs:
        policy = ddrl.load(run, **flags)
        labels = dict(flags)
        if args.untrained_search:
            policy = UntrainedSearch(policy, args.untrained_search, args.seed)
            labels = {"untrained_search": args.untrained_search}
        sight = tactics(policy, args.positions) if args.positions else None
        if sight is not None:
            print(f"{run} tactics: takes a win in one in {sight['win']['taken']:.2f} of "
                  f"{sight['win']['positions']} positions, blocks in "
                  f"{sight['block']['taken']:.2f} of {sight['block']['positions']} (positions "
                  f"of random games)")
            results.append({"run": run, "tactics": sight, **labels})
        for opponent in args.opponents if args.games else ():  # --games 0: tactics alone
            counts = play(policy, opponent, args.games, args.seed)
            low, high = wilson(counts["win"], counts["games"])
            by_seat = ", ".join(f"{seat} {counts['win_by_seat'][seat]}/"
                                f"{counts['games_by_seat'][seat]}"
                                for seat in counts["games_by_seat"])
            print(f"{run} vs {opponent}: won {counts['win']}/{counts['games']} "
                  f"({counts['win'] / counts['games']:.3f}, 95% [{low:.3f}, {high:.3f}]), "
                  f"drew {counts['draw']}, lost {counts['loss']}, illegal moves "
                  f"{counts['illegal']}, missed wins {counts['missed_wins']}, missed blocks "
                  f"{counts['missed_blocks']} in {counts['moves']} moves; wins by seat: {by_seat}")
            results.append({"run": run, "opponent": opponent, **labels, **counts,
                            "win_rate": counts["win"] / counts["games"],
                            "win_rate_ci95": [low, high]})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"games": args.games, "seed": args.seed, "results": results}, f,
                      indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
