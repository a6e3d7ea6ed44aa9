"""Named, seeded random streams.

Every consumer of randomness asks for its own stream by name, so adding a new random draw in
one component never shifts the numbers another component sees. Never use the global `random`
module or `np.random.seed`.
"""

from __future__ import annotations

import zlib

import numpy as np


def stream(seed: int, name: str) -> np.random.Generator:
    """Return an independent generator for `name`, reproducible for a given `seed`."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
