"""A perfect tic-tac-toe player by exhaustive negamax, written independently of envs/.

Board: tuple of 9 ints (0 empty, 1 X, 2 O), index = row * 3 + col, X moves first.
"""

from __future__ import annotations

import functools

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def winner(board) -> int:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return 0


def to_move(board) -> int:
    return 1 if board.count(1) == board.count(2) else 2


@functools.cache
def value(board) -> int:
    """+1 if the side to move wins with perfect play, 0 draw, -1 loss."""
    if winner(board):
        return -1  # the previous mover has just won
    if all(board):
        return 0
    me = to_move(board)
    return max(-value(board[:i] + (me,) + board[i + 1:]) for i in range(9) if not board[i])


def best_moves(board) -> list[int]:
    """All moves that keep the best game-theoretic value."""
    me = to_move(board)
    scores = {i: -value(board[:i] + (me,) + board[i + 1:]) for i in range(9) if not board[i]}
    best = max(scores.values())
    return [i for i, s in scores.items() if s == best]
