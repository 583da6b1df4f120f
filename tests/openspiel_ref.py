"""An OpenSpiel game as the reference side of the `differential` fixture (see conftest.py)."""

from __future__ import annotations


class SpielRef:
    """One OpenSpiel game, stepped in lockstep with ours: legal / to_move / play / outcome.

    For games whose OpenSpiel action numbering and player order are ours. A subclass adds
    `board()` (int array like our board: -1 empty, 0, 1) where the final boards can be
    compared; without it only moves and results are.
    """

    def __init__(self, game):
        self.s = game.new_initial_state()

    def legal(self):
        return self.s.legal_actions()

    def to_move(self):
        return self.s.current_player()

    def play(self, action):
        self.s.apply_action(action)

    def outcome(self):
        return tuple(self.s.returns()) if self.s.is_terminal() else None
