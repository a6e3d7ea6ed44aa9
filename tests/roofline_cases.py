"""Roofline decode configurations shared by the tests that hold its fast paths to the general
step: tests/perf/test_steps.py (each decode step) and tests/sim/test_skip_ahead.py (a span's
steps). tests/ is on sys.path (tests/conftest.py's folder, pytest's default import mode)."""

from __future__ import annotations

ROOFLINE_DECODE_ARGS = "model_name,tp,mfu,mbu"
ROOFLINE_DECODE_CASES = [  # on the h100
    ("llama3_8b", 1, 0.5, 0.7), ("llama3_70b", 8, 0.5, 0.7), ("deepseek_v3", 8, 0.45, 0.5),
    ("qwen3_30b_a3b", 2, 0.5, 0.7),
    ("minimax_m25", 4, 0.5, 0.7),  # its q/k norm spans all heads: one more all-reduce a layer
    ("llama3_8b", 3, 0.37, 0.25),  # every divisor of the compute term divided, mbu a power of two
    ("llama3_70b", 4, 0.25, 0.125),  # every divisor but the hardware's a power of two
]
