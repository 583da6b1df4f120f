"""`python -m az_jax.bench`: see az_jax/bench/__init__.py."""

import sys

from az_jax.bench import main

try:
    main(host_devices=True)
except KeyboardInterrupt:  # Ctrl-C mid-benchmark: no traceback (bench learn has its own)
    print("interrupted", file=sys.stderr)
    sys.exit(130)
