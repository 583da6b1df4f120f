"""Play a trained model in the browser: `python -m az_jax.web --model gomoku_15x15`.

See `az_jax.web.server` for the JSON API and `az_jax.web.geometry` for the board shapes.
"""

from az_jax.web.server import Games, make_server, serve_in_thread

__all__ = ["Games", "make_server", "serve_in_thread"]
