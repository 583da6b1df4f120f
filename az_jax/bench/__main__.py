"""`python -m az_jax.bench`: see az_jax/bench/__init__.py."""

from az_jax.bench import main

main(host_devices=True)
