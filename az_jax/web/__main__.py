"""`python -m az_jax.web`: serve the game page (see az_jax/web/server.py)."""

import sys

from az_jax.web.server import main

sys.exit(main())
