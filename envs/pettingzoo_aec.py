"""pettingzoo_aec: a turn-based PettingZoo (AEC) game as the env of one learning player.

    python main.py --env_name pettingzoo_aec --model_name selfplay_ppo     # Connect Four

One agent of the game is the learner's (its seat drawn per episode with ``--seat random``, so
the policy learns to move first and second); every other agent is an opponent that moves inside
``step`` until it is the learner's turn again:

- ``--opponent selfplay`` (training's default): a frozen snapshot of the learning policy, drawn
  per episode from the model's pool (models/selfplay_ppo.py: ``sample_opponent`` and
  ``opponent_actions``); the env is handed the acting model by its rollout worker
  (``bind_policy``), so it steps in the worker's process (``--env_placement worker``);
- ``--opponent random``: uniform over the legal moves;
- ``--opponent scripted``: win now if a move wins, else block a move that would let the
  opponent win now, else a random legal move, nearer the centre column first (Connect Four and
  Tic-Tac-Toe: ``scripted_move``);
- ``--opponent opportunist``: win now if a move wins, else a random legal move: the random
  player's odd positions, with every threat the learner leaves open punished at once;
- ``--fixed_opponents random=0.1,scripted=0.1`` (with selfplay): those shares of the games
  against the random, the opportunist or the scripted player instead of a snapshot, drawn per
  seat and game, so that the policy also meets positions self-play rarely makes (a threat left
  unblocked).

The test worker, ``--evaluate`` and ``ddrl.load(...).play`` meet ``--eval_opponent`` (default
random) instead of ``--opponent``. The learner sees the game as the game shows it to its seat
(Classic games: a Dict of the board planes, its own pieces first, and an int8 ``action_mask``,
which ddrl's models obey); its reward is the game's reward to its seat summed since its last
move (+1 win, -1 loss, 0 draw in Classic games). The info of an episode's last step carries
``episode_metrics`` (win, draw, loss, illegal: 1 if the learner's move was illegal, and
opponents: per other seat the pool slot met, -1 for a fixed opponent, that snapshot's stamp
and the learner's score against that seat) for the loop, and ``is_success`` (a win) for the
evaluations' success rate. Games of more than two players: every other seat draws its own
opponent, and the learner is rated against each (models/selfplay_ppo.py).

``--both_seats`` (with ``--opponent selfplay``): in the games against the learning policy
itself (``selfplay_ppo --selfplay_latest p``) nobody moves inside ``step``: each step is one
move of whoever is to move, seen from that player's side, so the policy learns from both
players' moves. Each step's reward is the mover's, and its info's ``step_report`` says
``next_sign`` -1 (the next state is the opponent's to move: agents/default_agent.py negates its
value and the advantage flowing back from it, negamax GAE); in games against a snapshot it is +1.

``--pz_env`` names a module with an AEC ``env(**kwargs)`` (``pettingzoo.classic.connect_four_v3``,
``pettingzoo.classic.tictactoe_v3``, a module of your own); ``--pz_kwargs`` is a JSON object of
its arguments. Every agent must observe and act in the spaces of the first (one policy plays any
seat).
"""

import argparse

import numpy as np
from gymnasium import spaces

from core import spaces as carried_spaces
from core.argtypes import checked_text
from core.errors import ConfigError
from core.types import STEP_REPORT_KEY
from envs import register_env
from envs.board_games import BOARDS, board_game, scripted_move
from envs.pettingzoo_env import _parse_kwargs, make_pettingzoo_env, with_render_mode
from core.types import LATEST_POLICY as LATEST

OPPONENTS = ("selfplay", "random", "opportunist", "scripted")
#: the fixed players that know the game's rules (envs/board_games.py scripted_move)
RULE_PLAYERS = ("opportunist", "scripted")


def make_aec_env(module_name, kwargs):
    return make_pettingzoo_env(module_name, kwargs, "env",
                               "pettingzoo.classic.connect_four_v3 or "
                               "pettingzoo.classic.tictactoe_v3",
                               "AEC (turn-based) API")


def _parse_shares(text):
    """'random=0.1,scripted=0.2' -> {"random": 0.1, "scripted": 0.2}; '' or 'none' -> {}.
    ValueError (a ConfigError) naming what is wrong."""
    text = str(text).strip()
    if text.lower() in ("", "none"):
        return {}
    shares = {}
    for item in text.split(","):
        kind, sep, value = item.strip().partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or kind.strip() not in OPPONENTS[1:] or not 0.0 <= share <= 1.0:
            raise ConfigError(f"--fixed_opponents {text!r}: write kind=share pairs separated by "
                              f"commas, kinds {', '.join(OPPONENTS[1:])}, shares in [0, 1], "
                              f"e.g. random=0.1,scripted=0.1.")
        shares[kind.strip()] = share
    if sum(shares.values()) > 1.0 + 1e-9:
        raise ConfigError(f"--fixed_opponents {text!r}: the shares add up to "
                          f"{sum(shares.values()):g}, more than all the games.")
    return shares


@register_env("pettingzoo_aec")
class PettingZooTurnEnv:
    """A PettingZoo AEC game as one learning player's env (the module docstring)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pz_env", default="pettingzoo.classic.connect_four_v3",
                            help="module with a PettingZoo AEC env() (default: %(default)s)")
        parser.add_argument("--pz_kwargs", type=checked_text(_parse_kwargs), default="{}",
                            help="JSON object of env()'s arguments (default: '{}')")
        parser.add_argument("--opponent", choices=OPPONENTS, default="selfplay",
                            help="who plays the other seats in training: snapshots of the "
                                 "learning policy (selfplay, with --model_name selfplay_ppo), "
                                 "random legal moves, the opportunist (wins when it can, else "
                                 "random) or the scripted player (default: "
                                 "%(default)s)")
        parser.add_argument("--fixed_opponents", type=checked_text(_parse_shares), default="",
                            help="with --opponent selfplay, the share of games played against "
                                 "the fixed players instead of the pool, e.g. "
                                 "random=0.1,scripted=0.1: positions self-play rarely reaches "
                                 "(a player that ignores a threat, a scripted trap) "
                                 "(default: none)")
        parser.add_argument("--eval_opponent", choices=OPPONENTS[1:], default="random",
                            help="who plays the other seats in evaluations, --evaluate and "
                                 "play (default: %(default)s)")
        parser.add_argument("--both_seats", action=argparse.BooleanOptionalAction, default=False,
                            help="in games against the learning policy itself "
                                 "(selfplay_ppo --selfplay_latest), it moves for both players "
                                 "and learns from both: each step is one move of whoever is to "
                                 "move, from that player's side (default: it learns from its "
                                 "seat only)")
        parser.add_argument("--seat", default="random",
                            help="the learner's agent: random (drawn per episode), or an agent "
                                 "id such as player_0 (default: %(default)s)")

    @staticmethod
    def label(config):
        return getattr(config, "pz_env", "pettingzoo_aec").split(".")[-1]

    def __init__(self, args, seed=None):
        self.module_name = args.pz_env
        self.env = make_aec_env(args.pz_env, with_render_mode(_parse_kwargs(args.pz_kwargs),
                                                              args.render_mode))
        self.agents = list(self.env.possible_agents)
        self.opponent = args.eval_opponent if args.evaluation else args.opponent
        self.game = board_game(args.pz_env)
        self.fixed_shares = (_parse_shares(args.fixed_opponents)
                             if self.opponent == "selfplay" else {})
        ruled = [k for k in RULE_PLAYERS if k == self.opponent or k in self.fixed_shares]
        if ruled and self.game is None:
            raise ConfigError(
                f"--opponent/--eval_opponent/--fixed_opponents {ruled[0]} with --pz_env "
                f"{args.pz_env}: the {ruled[0]} "
                f"player knows {', '.join(sorted(BOARDS))} only. Use random or selfplay.")
        if args.seat != "random" and args.seat not in self.agents:
            raise ConfigError(f"--seat {args.seat!r}: {args.pz_env}'s agents are "
                              f"{', '.join(self.agents)}; or random.")
        self.seat = args.seat
        self.both_seats = args.both_seats and not args.evaluation
        if self.both_seats and (self.opponent != "selfplay" or len(self.agents) != 2):
            raise ConfigError(
                f"--both_seats: the learning policy moves for both players of a two-player game "
                f"it plays against itself (--opponent selfplay); here --opponent "
                f"{self.opponent} with {len(self.agents)} players. Drop --both_seats.")
        first = self.agents[0]
        self.observation_space = self.env.observation_space(first)
        self.action_space = self.env.action_space(first)
        for agent in self.agents[1:]:
            if (self.env.observation_space(agent) != self.observation_space
                    or self.env.action_space(agent) != self.action_space):
                raise ConfigError(
                    f"--env_name pettingzoo_aec: the agents of {args.pz_env} observe or act in "
                    f"different spaces ({first}: {self.observation_space}, "
                    f"{self.action_space}; {agent}: {self.env.observation_space(agent)}, "
                    f"{self.env.action_space(agent)}); one policy plays every seat here.")
        if not isinstance(self.action_space, spaces.Discrete):
            raise ConfigError(f"--env_name pettingzoo_aec takes games with Discrete moves; "
                              f"{args.pz_env}'s are {self.action_space}.")
        self.encode = carried_spaces.layout_of(self.observation_space).encode
        self.rng = np.random.default_rng(seed)
        self.reward_threshold = None
        self.policy_source = None
        self.learner, self.opponents = None, {}
        self.mover = None  # --both_seats, a game against itself: who moves at the next step

    def bind_policy(self, source):
        """The rollout worker's callable giving the model acting now (core/sampling/envs.py)."""
        self.policy_source = source

    # -- a game ------------------------------------------------------------------------------
    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.env.reset(seed=None if seed is None else int(seed))
        self.learner = (self.agents[int(self.rng.integers(len(self.agents)))]
                        if self.seat == "random" else self.seat)
        self.opponents, self.kinds = {}, {}
        for agent in self.agents:
            if agent != self.learner:
                self.kinds[agent] = self._draw_kind()
                self.opponents[agent] = (self._draw_opponent() if self.kinds[agent] == "selfplay"
                                         else (-1, -1))
        self.pending = 0.0
        self.illegal = 0
        self.returns = {}  # every seat's return this game
        self.mover = None
        if self.both_seats and all(slot == LATEST for slot, _ in self.opponents.values()):
            self.mover = self.env.agent_selection  # it moves for both, from the first move
            return self.env.observe(self.mover), {}
        self._play_opponents()
        return self.env.observe(self.learner), {}

    def _draw_kind(self):
        """Who plays a seat this game: --opponent, or with --fixed_opponents a fixed player in
        its share of self-play's games."""
        if self.fixed_shares:
            u, edge = self.rng.random(), 0.0
            for kind, share in self.fixed_shares.items():
                edge += share
                if u < edge:
                    return kind
        return self.opponent

    def _draw_opponent(self):
        if self.opponent != "selfplay":
            return (-1, -1)
        model = self._model()
        return model.sample_opponent(self.rng)

    def _model(self):
        model = self.policy_source() if self.policy_source is not None else None
        if model is None or not hasattr(model, "opponent_actions"):
            raise ConfigError(
                "--opponent selfplay: the opponents are snapshots of the learning policy, so "
                "the model must keep a pool of them (--model_name selfplay_ppo) and the env must "
                "step in a rollout worker's process (--env_placement worker, the default: it is "
                "handed the model there). Or train against --opponent random or scripted.")
        return model

    def _over(self):
        return self.env.terminations[self.learner] or self.env.truncations[self.learner]

    def _play_opponents(self):
        """Opponents move until it is the learner's turn or the game is over."""
        while not self._over() and self.env.agent_selection != self.learner:
            agent = self.env.agent_selection
            if self.env.terminations[agent] or self.env.truncations[agent]:
                self._env_step(None)
            else:
                self._env_step(self._opponent_move(agent, self.env.observe(agent)))
            self.pending += float(self.env.rewards.get(self.learner, 0.0))

    def _env_step(self, action):
        """One move of the game; every seat's rewards of it added to its return."""
        self.env.step(action)
        for agent, reward in self.env.rewards.items():
            self.returns[agent] = self.returns.get(agent, 0.0) + float(reward)

    def _opponent_move(self, agent, observation):
        kind = self.kinds.get(agent, self.opponent)
        if kind in RULE_PLAYERS:
            return scripted_move(self.game[0], observation, self.rng,
                                 block=kind == "scripted")
        if kind == "random":
            mask = observation.get("action_mask") if isinstance(observation, dict) else None
            legal = (np.flatnonzero(mask) if mask is not None
                     else np.arange(self.action_space.n))
            return int(self.rng.choice(legal))
        slot, _ = self.opponents[agent]
        batch = carried_spaces.stack([self.encode(observation)])
        return int(self._model().opponent_actions(slot, batch)[0]) + int(self.action_space.start)

    def step(self, action):
        if self.mover is not None:
            return self._both_seats_step(int(action))
        action = int(action)
        observation = self.env.observe(self.learner)
        mask = observation.get("action_mask") if isinstance(observation, dict) else None
        if mask is not None and not mask[action - int(self.action_space.start)]:
            self.illegal = 1  # the game itself ends it (Classic: -1 to the mover)
        self._env_step(action)
        self.pending = float(self.env.rewards.get(self.learner, 0.0))
        self._play_opponents()
        reward, self.pending = self.pending, 0.0
        terminated = bool(self.env.terminations[self.learner])
        truncated = not terminated and bool(self.env.truncations[self.learner])
        info = {STEP_REPORT_KEY: {"next_sign": 1.0}} if self.both_seats else {}
        if terminated or truncated:
            info.update(self._outcome())
        return self.env.observe(self.learner), reward, terminated, truncated, info

    def _both_seats_step(self, action):
        """One move of the player to move in a game against itself (--both_seats): its reward
        is that move's, and the next state is its opponent's to move (next_sign -1: the
        agent negates that state's value for this move, core/types.py STEP_REPORT_KEY)."""
        mover = self.mover
        observation = self.env.observe(mover)
        mask = observation.get("action_mask") if isinstance(observation, dict) else None
        if mask is not None and not mask[action - int(self.action_space.start)]:
            self.illegal = 1  # its own move either way
        self._env_step(action)
        reward = float(self.env.rewards.get(mover, 0.0))
        terminated = bool(self.env.terminations[mover])
        truncated = not terminated and bool(self.env.truncations[mover])
        info = {}
        if terminated or truncated:
            info.update(self._outcome())
        self.mover = self.env.agent_selection
        info[STEP_REPORT_KEY] = {"next_sign": 1.0 if self.mover == mover else -1.0}
        return self.env.observe(self.mover), reward, terminated, truncated, info

    def _outcome(self):
        """The last info's scores of a game, from the learner's seat: win/draw/loss by the
        sign of its return, and against each other seat (its pool slot, that snapshot's
        stamp) 1, 0.5 or 0 as the learner's return is above, equal to or below that seat's
        (a two-player zero-sum game: the win, draw or loss itself)."""
        mine = self.returns.get(self.learner, 0.0)
        outcome = np.sign(mine)
        opponents = []
        for agent, (slot, stamp) in self.opponents.items():
            theirs = self.returns.get(agent, 0.0)
            opponents.append([float(slot), float(stamp),
                              1.0 if mine > theirs else 0.5 if mine == theirs else 0.0])
        return {"is_success": bool(outcome > 0), "episode_metrics": {
            "win": float(outcome > 0), "draw": float(outcome == 0),
            "loss": float(outcome < 0), "illegal": float(self.illegal),
            "opponents": opponents}}

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()
