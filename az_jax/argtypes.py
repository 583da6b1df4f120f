"""Argparse types shared by every command line, in the lowest layer so that evaluation's
command lines (`az_jax.eval.solver_bench`) and the front ends (`az_jax.cli`, which
re-exports them) check numbers with one function. No JAX import: `--help` stays fast."""

from __future__ import annotations

import argparse


def integer(low: int, high: int | None = None):
    """An argparse type: an integer from `low` to `high` (None: no bound), or a one-line
    error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: give an integer "
                                             f"{bound}")
        return value

    return parse


def counts(low: int, high: int):
    """An argparse type: a comma-separated list of integers from `low` to `high`, e.g.
    '64' or '64,400' (simulation counts), or a one-line error with an example."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(t) for t in str(text).split(",") if t.strip()]
        except ValueError:
            values = []
        if not values or min(values) < low or max(values) > high:
            raise argparse.ArgumentTypeError(f"{text!r}: give integers from {low} to {high}, "
                                             f"one or comma-separated, e.g. 64 or 64,400")
        return values

    return parse
