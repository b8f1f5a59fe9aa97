"""The rules of the board games ddrl knows, as PettingZoo Classic shows them (Connect Four,
Tic-Tac-Toe): where a move lands, who has won; the scripted player built on them
(envs/pettingzoo_aec.py ``--opponent scripted``); and a depth-limited negamax search over them
with a learned value at its leaves (models/selfplay_ppo.py ``--search_depth``).

Not a plugin (it registers nothing): the env and the model share these rules. A board is the
Classic observation's planes, [rows, cols, 2]: the pieces of the player to move, then its
opponent's; Connect Four's row 0 is the top (pieces fall to the highest free row index),
Tic-Tac-Toe's action a fills cell (a // 3, a % 3).
"""
import numpy as np

#: game -> (rows, columns, in a row to win, pieces fall)
BOARDS = {"connect_four": (6, 7, 4, True), "tictactoe": (3, 3, 3, False)}


def board_game(module_name):
    """(name, (rows, columns, in a row to win, pieces fall)) of a board game these rules know,
    by the PettingZoo module's name, or None."""
    for name, shape in BOARDS.items():
        if module_name.split(".")[-1].startswith(name):
            return name, shape
    return None


def board_of_spaces(observation_space, action_space):
    """The game these rules know whose Classic observation and action spaces these are
    (planes [rows, cols, 2] and an action mask; Discrete(cols) for falling pieces, else
    Discrete(rows * cols)), or None."""
    try:
        planes = tuple(observation_space["observation"].shape)
        actions = int(action_space.n)
        observation_space["action_mask"]
    except (KeyError, TypeError, AttributeError):
        return None
    for name, (rows, cols, _, falls) in BOARDS.items():
        if planes == (rows, cols, 2) and actions == (cols if falls else rows * cols):
            return name
    return None


def wins(board, row, col, need):
    """Whether a piece at (row, col) of ``board`` (bool [rows, cols], that piece set) completes
    ``need`` in a row."""
    rows, cols = board.shape
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < rows and 0 <= c < cols and board[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= need:
            return True
    return False


def landing_cell(game, action, occupied):
    """The cell (row, col) an action fills: Connect Four's lowest free row of a column,
    Tic-Tac-Toe's cell."""
    rows, cols, _, falls = BOARDS[game]
    if falls:
        free = np.flatnonzero(~occupied[:, action])
        return int(free[-1]), action
    return action // cols, action % cols


def scripted_move(game, observation, rng, block=True):
    """Win now, else block the opponent's win now, else a random legal move (nearer the
    centre first). ``observation``: the Classic game's Dict for the player to move (planes:
    its own pieces, then the opponent's; an action_mask). ``block=False``: the opportunist,
    win now, else any legal move (uniformly): a random player that never misses a win."""
    rows, cols, need, _ = BOARDS[game]
    planes = np.asarray(observation["observation"], bool).reshape(rows, cols, 2)
    mine, theirs = planes[..., 0], planes[..., 1]
    legal = np.flatnonzero(np.asarray(observation["action_mask"]))
    occupied = mine | theirs
    for board in (mine, theirs) if block else (mine,):  # my win first, then the block
        for action in legal:
            r, c = landing_cell(game, int(action), occupied)
            trial = board.copy()
            trial[r, c] = True
            if wins(trial, r, c, need):
                return int(action)
    centre = (cols - 1) / 2 if BOARDS[game][3] else None
    if centre is None or not block:
        return int(rng.choice(legal))
    distance = np.abs(legal - centre)
    nearest = legal[distance == distance.min()]
    # mostly the most central legal column, now and then any: a scripted player that never
    # varies is beaten by one memorized line
    return int(rng.choice(nearest) if rng.random() < 0.5 else rng.choice(legal))


# -- many boards at once, for the search ----------------------------------------------------
class Rules:
    """A game's rules on batches of boards: ``mine``, ``theirs`` bool [N, rows * cols] (the
    player to move's pieces and its opponent's, the planes flattened row-major)."""

    def __init__(self, game):
        self.game = game
        self.rows, self.cols, self.need, self.falls = BOARDS[game]
        self.cells = self.rows * self.cols
        self.actions = self.cols if self.falls else self.cells
        lines = []
        for r in range(self.rows):
            for c in range(self.cols):
                for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                    end_r, end_c = r + dr * (self.need - 1), c + dc * (self.need - 1)
                    if 0 <= end_r < self.rows and 0 <= end_c < self.cols:
                        lines.append([(r + dr * k) * self.cols + c + dc * k
                                      for k in range(self.need)])
        self.lines = np.asarray(lines)  # [L, need]: every run of cells that wins

    def legal(self, occupied):
        """bool [N, actions]: the moves the game allows."""
        if self.falls:
            return ~occupied[:, :self.cols]  # a column is open while its top cell is free
        return ~occupied

    def landing(self, occupied):
        """int [N, actions]: the flat cell each move fills (meaningful where legal)."""
        if not self.falls:
            return np.broadcast_to(np.arange(self.cells), occupied.shape)
        stacked = occupied.reshape(-1, self.rows, self.cols).sum(1)
        row = self.rows - 1 - stacked  # the highest free row index of each column
        return row * self.cols + np.arange(self.cols)

    def won(self, pieces):
        """bool [N]: whether ``pieces`` hold a whole line."""
        return pieces[:, self.lines].all(-1).any(-1)

    def observation(self, mine, theirs):
        """The Classic observation of these boards for the player to move (int8 planes
        [N, rows, cols, 2] and action mask [N, actions])."""
        planes = np.stack([mine, theirs], -1).reshape(-1, self.rows, self.cols, 2)
        return {"observation": planes.astype(np.int8),
                "action_mask": self.legal(mine | theirs).astype(np.int8)}


def negamax(rules, mine, theirs, depth, gamma, leaf_value):
    """Each root move's value to the player to move, searched ``depth`` moves deep over the
    rules: float [N, actions], -inf where illegal.

    A finished game is worth -1 to the player to move in it (the last mover won) or 0 (a
    draw); a position at the depth whose game goes on is worth ``leaf_value(mine, theirs)``
    (float [M], to its player to move: the learned value, clipped to [-gamma^2, gamma]); a
    position inside the tree is worth
    max over its moves of -gamma * (the next position's worth), so a win sooner counts more,
    as in the value's own training (negamax GAE: V(s) = r + gamma * -V(s') for alternating
    movers). Full width, level by level, numpy-vectorized: 7^depth leaves for Connect Four."""
    levels = []  # per move deep: (parent, action, worth, open)
    for _ in range(depth):
        occupied = mine | theirs
        parent, action = np.nonzero(rules.legal(occupied))
        cell = rules.landing(occupied)[parent, action]
        moved = mine[parent].copy()
        moved[np.arange(len(parent)), cell] = True
        won = rules.won(moved)
        full = (occupied[parent].sum(1) + 1) == rules.cells
        worth = np.where(won, -1.0, 0.0)
        still_open = ~won & ~full
        levels.append((parent, action, worth, still_open))
        # the next position is the opponent's to move: its pieces first
        mine, theirs = theirs[parent][still_open], moved[still_open]
    # Clipped to what a game still going can be worth to its player to move: at best a win
    # with its next move (gamma), at worst a loss to the opponent's next (-gamma^2); a value
    # outside would outrank (or undercut) a win found in the tree.
    worth_below = (np.clip(np.asarray(leaf_value(mine, theirs), np.float64), -gamma * gamma,
                           gamma) if len(mine) else np.zeros(0))
    for level in range(depth - 1, -1, -1):
        parent, action, worth, still_open = levels[level]
        worth = worth.copy()
        worth[still_open] = worth_below
        score = -gamma * worth  # each move's worth to the player who made it
        if level == 0:
            return parent, action, score
        # every open position has a legal move (its board is not full): no -inf survives
        worth_below = np.full(int(levels[level - 1][3].sum()), -np.inf)
        np.maximum.at(worth_below, parent, score)


def search_moves(rules, mine, theirs, depth, gamma, leaf_value, prior):
    """The move the search prefers for each of N boards (int [N]): the highest root value;
    among moves within 1e-9 of it, the one ``prior`` (float [N, actions], the policy's
    logits) ranks first; -1 for a board with no legal move. ``depth`` >= 1."""
    count = len(mine)
    values = np.full((count, rules.actions), -np.inf)
    parent, action, score = negamax(rules, mine, theirs, depth, gamma, leaf_value)
    values[parent, action] = score
    best = values.max(1, keepdims=True)
    near_best = values >= best - 1e-9
    ranked = np.where(near_best, prior, -np.inf)
    moves = ranked.argmax(1)
    moves[~np.isfinite(best[:, 0])] = -1
    return moves
