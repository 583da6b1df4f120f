"""`python -m az_jax.web`: serve the game page (see az_jax/web/server.py)."""

import sys

from az_jax.web.server import main

status = main()
from az_jax.checkpoint import quiet_exit  # noqa: E402 - loaded by then (a fast --help)

sys.exit(quiet_exit(status))
