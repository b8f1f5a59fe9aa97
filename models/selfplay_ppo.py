"""selfplay_ppo: PPO that plays a two-player game against frozen snapshots of itself.

    python main.py --env_name pettingzoo_aec --model_name selfplay_ppo

The model keeps a pool of ``--selfplay_pool K`` snapshots of its own parameters as buffers, so
the pool travels to the rollout workers with the weights, and is checkpointed and resumed with
them (nothing besides the weights to save). The pool starts with the initial policy; every
``--snapshot_every N`` updates (optimizer steps) the learner's parameters replace the oldest
snapshot. The env (envs/pettingzoo_aec.py ``--opponent selfplay``) asks, per episode, which
snapshot to meet (``sample_opponent``: with ``--selfplay_latest p`` the learning policy itself
as it acts now in a share p of the games, else a snapshot uniformly, or with ``--opponent_sampling hard`` weighted
by (1 - the learner's score against it)^2 + 0.05, prioritized fictitious self-play as in
AlphaStar) and has it move (``opponent_actions``, sampling from its policy).

After each round the loop hands the learner's model the games that finished
(``observe_episodes``): each updates an Elo rating of the learner and of the snapshot it met
(K = ``--elo_k``; a snapshot enters the pool with the learner's rating at that moment) and that
snapshot's score (games against the learning policy itself, ``--selfplay_latest``, are not
rated); in a game of more than two players every other seat has its own snapshot and the
learner is rated against each as in a match of two (1 if its return beat that seat's, 0.5 if
equal), each pairing with K divided by the number of opponents; metrics.csv gets the round's win/draw/loss rates, illegal moves, the learner's
rating, the pool's size and every snapshot's rating ("pool_elo": one number per slot, oldest
slot first as stored). A game whose snapshot was replaced before the round ended is not rated
(its stamp no longer matches).

Everything else is PPOModel's (models/ppo.py): the masked policy on the board's Dict
observation, the update, export (of the learning policy).
"""
import copy

import numpy as np
import torch

from core.argtypes import non_negative_int, positive_int, unit_interval
from core.errors import ConfigError
from core.types import LATEST_POLICY
from models import register_model
from models.ppo import PPOActing, PPOModel

START_RATING = 1000.0
#: the slot that stands for the learning policy itself (not frozen, not rated)
LATEST = LATEST_POLICY


@register_model("selfplay_ppo")
class SelfPlayPPOModel(PPOModel):
    """PPO with a pool of its own frozen snapshots as opponents (the module docstring)."""

    episode_metrics = ("win_rate", "draw_rate", "loss_rate", "illegal_moves", "elo",
                       "pool_size", "pool_elo")
    line_metrics = (("win_rate", "win", ".2f"), ("elo", "elo", ".0f"))

    @staticmethod
    def add_args(parser):
        PPOModel.add_args(parser)
        parser.add_argument("--selfplay_pool", type=positive_int, default=8,
                            help="snapshots of the policy kept as opponents (default: "
                                 "%(default)s)")
        parser.add_argument("--snapshot_every", type=positive_int, default=40,
                            help="updates (optimizer steps) between snapshots (default: "
                                 "%(default)s)")
        parser.add_argument("--opponent_sampling", choices=["uniform", "hard"],
                            default="uniform",
                            help="how each game's opponent is drawn from the pool: uniformly, "
                                 "or favouring the snapshots the learner scores worst against "
                                 "(default: %(default)s)")
        parser.add_argument("--selfplay_latest", type=unit_interval, default=0.0,
                            help="the share of games against the learning policy itself (as it "
                                 "acts now, unrated) rather than a snapshot of the pool "
                                 "(default: %(default)s)")
        parser.add_argument("--elo_k", type=float, default=16.0,
                            help="the Elo update's step (default: %(default)s)")
        parser.add_argument("--search_depth", type=non_negative_int, default=0,
                            help="acting deterministically (evaluations, --evaluate, "
                                 "ddrl.load), search this many moves ahead over the game's "
                                 "rules with the learned value at the leaves (negamax; Connect "
                                 "Four and Tic-Tac-Toe); 0: the network's own move. Training's "
                                 "sampled moves never search (default: %(default)s)")
        parser.add_argument("--search_gamma", type=unit_interval, default=0.9,
                            help="the search's discount per move: the value's own, so the "
                                 "agent's --gamma (default: %(default)s, the Connect Four "
                                 "preset's)")

    def __init__(self, args, observation_space, action_space):
        super().__init__(args, observation_space, action_space)
        if args.recurrent != "none":
            raise ConfigError(f"--recurrent {args.recurrent} with --model_name selfplay_ppo: the "
                              f"snapshots act without memory. Drop --recurrent.")
        self.shapes = [(name, p.shape, p.numel()) for name, p in self.named_parameters()]
        size = sum(n for _, _, n in self.shapes)
        slots = args.selfplay_pool
        self.register_buffer("pool", torch.zeros(slots, size))
        self.register_buffer("pool_stamp", torch.full((slots,), -1.0))   # -1: empty
        self.register_buffer("pool_rating", torch.full((slots,), START_RATING))
        self.register_buffer("pool_score", torch.full((slots,), 0.5))
        self.register_buffer("rating", torch.tensor(START_RATING))
        self.register_buffer("updates_done", torch.tensor(0.0))
        self.register_buffer("next_slot", torch.tensor(0.0))
        self.opponent_cache = {}
        self.search_rules = self._search_rules(args, observation_space, action_space)
        self.snapshot()  # the initial policy is the first opponent

    @staticmethod
    def _search_rules(args, observation_space, action_space):
        if not args.search_depth:
            return None
        # the rules live beside the env; imported only when a search is asked for
        from envs.board_games import BOARDS, Rules, board_of_spaces
        game = board_of_spaces(observation_space, action_space)
        if game is None:
            raise ConfigError(
                f"--search_depth {args.search_depth}: the search plays by a game's rules, and "
                f"it knows {', '.join(sorted(BOARDS))} (PettingZoo Classic's board planes and "
                f"action mask); this model's observation space is {observation_space} with "
                f"actions {action_space}. Use --search_depth 0.")
        if args.normalize_obs:
            raise ConfigError(f"--search_depth {args.search_depth} with --normalize_obs: the "
                              f"search reads the board from the observation, which the "
                              f"normalizer rescales. Drop one of them.")
        return Rules(game)

    # -- the pool (on the learner) -----------------------------------------------------------
    @torch.no_grad()
    def snapshot(self):
        slot = int(self.next_slot)
        self.pool[slot] = torch.cat([p.detach().reshape(-1) for p in self.parameters()])
        self.pool_stamp[slot] = self.updates_done
        self.pool_rating[slot] = self.rating
        self.pool_score[slot] = 0.5
        self.next_slot.fill_((slot + 1) % len(self.pool))

    @torch.no_grad()
    def after_update(self):
        """The learner's hook after each optimizer step (core/learning/learner.py)."""
        self.updates_done += 1
        if int(self.updates_done) % self.args.snapshot_every == 0:
            self.snapshot()

    @torch.no_grad()
    def observe_episodes(self, episodes):
        """Rate the round's games (the module docstring); metrics.csv's columns."""
        if not episodes:
            return {}
        for episode in episodes:
            opponents = episode.get("opponents", ())
            # a game of several opponents is a match against each (pairwise Elo), each
            # pairing weighted 1 / (opponents): one game moves the learner by at most K
            k = self.args.elo_k / max(1, len(opponents))
            for slot, stamp, score in opponents:
                slot = int(slot)
                if slot < 0 or float(self.pool_stamp[slot]) != stamp:
                    continue  # a fixed player, the learning policy itself, a replaced snapshot
                expected = 1.0 / (1.0 + 10.0 ** ((float(self.pool_rating[slot])
                                                  - float(self.rating)) / 400.0))
                self.rating += k * (score - expected)
                self.pool_rating[slot] -= k * (score - expected)
                self.pool_score[slot] = 0.9 * self.pool_score[slot] + 0.1 * score
        filled = self.pool_stamp >= 0

        def rate(key):
            return float(np.mean([e[key] for e in episodes]))
        return {"win_rate": rate("win"), "draw_rate": rate("draw"), "loss_rate": rate("loss"),
                "illegal_moves": float(sum(e["illegal"] for e in episodes)),
                "elo": float(self.rating), "pool_size": int(filled.sum()),
                "pool_elo": " ".join(f"{r:.0f}" for r, f in zip(self.pool_rating.tolist(),
                                                                filled.tolist()) if f)}

    # -- acting with search ---------------------------------------------------------------------
    @torch.no_grad()
    def choose_actions(self, obs, deterministic=False, values=True, state=None,
                       episode_starts=None):
        """PPO's, except that with --search_depth a deterministic move is the search's
        (envs/board_games.py ``search_moves``: the learned value at the leaves, the policy's
        logits breaking ties); the extras (log-probabilities, values) stay the network's."""
        actions, extras = super().choose_actions(obs, deterministic, values, state,
                                                 episode_starts)
        if deterministic and self.search_rules is not None:
            actions = self.searched_moves(obs).astype(np.asarray(actions).dtype)
        return actions, extras

    SEARCH_CHUNK = 32768  # leaf positions valued per forward pass

    def searched_moves(self, obs):
        """The search's move for each board of a batch (int [B])."""
        from envs.board_games import search_moves
        rules = self.search_rules
        planes = np.asarray(obs["observation"], bool).reshape(-1, rules.cells, 2)
        prior = self.actor(self.features(self.flat_obs(obs))).float().cpu().numpy()

        def leaf_value(mine, theirs):
            out = []
            for start in range(0, len(mine), self.SEARCH_CHUNK):
                part = slice(start, start + self.SEARCH_CHUNK)
                batch = self.flat_obs(rules.observation(mine[part], theirs[part]))
                out.append(self.values(self.features(batch)).float().cpu().numpy())
            return np.concatenate(out)
        return search_moves(rules, planes[..., 0], planes[..., 1], self.args.search_depth,
                            self.args.search_gamma, leaf_value, prior)

    def export_module(self):
        """PPO's acting module (choose_actions differs from PPO's only by the search, which
        an export cannot hold: refused with --search_depth)."""
        if self.search_rules is not None:
            raise ConfigError(
                f"export with --search_depth {self.args.search_depth}: the search over the "
                f"game's rules runs in Python beside the network and is not part of an "
                f"exported module. Export the network's own move: "
                f"ddrl.load(RUN, search_depth=0).export(...).")
        return PPOActing(self)

    # -- the opponents (on the rollout workers, asked by the env) ----------------------------
    def sample_opponent(self, rng):
        """(slot, stamp) of the snapshot a new game meets, drawn with the env's ``rng``;
        (LATEST, LATEST) for the learning policy itself (--selfplay_latest)."""
        if self.args.selfplay_latest and rng.random() < self.args.selfplay_latest:
            return LATEST, float(LATEST)
        filled = np.flatnonzero(self.pool_stamp.numpy() >= 0)
        if self.args.opponent_sampling == "uniform":
            slot = int(rng.choice(filled))
        else:
            weights = (1.0 - self.pool_score.numpy()[filled]) ** 2 + 0.05
            slot = int(rng.choice(filled, p=weights / weights.sum()))
        return slot, float(self.pool_stamp[slot])

    def opponent_actions(self, slot, obs):
        """The snapshot in ``slot`` acting on ``obs`` (a batch, as choose_actions takes it),
        sampling from its policy (LATEST: this model as it is)."""
        if slot == LATEST:
            return self.choose_actions(obs, values=False)[0]
        stamp = float(self.pool_stamp[slot])
        cached = self.opponent_cache.get(slot)
        if cached is None or cached[0] != stamp:
            opponent = cached[1] if cached is not None else self._frozen_copy()
            opponent.set_weights(self._snapshot_weights(slot, opponent))
            self.opponent_cache[slot] = cached = (stamp, opponent)
        actions, _ = cached[1].choose_actions(obs, values=False)
        return actions

    def _frozen_copy(self):
        cache, self.opponent_cache = self.opponent_cache, {}
        try:
            return copy.deepcopy(self)
        finally:
            self.opponent_cache = cache

    def _snapshot_weights(self, slot, opponent):
        weights = {name: t.numpy() for name, t in opponent.state_dict().items()}
        vector, offset = self.pool[slot].numpy(), 0
        for name, shape, n in self.shapes:
            weights[name] = vector[offset:offset + n].reshape(shape)
            offset += n
        return weights
