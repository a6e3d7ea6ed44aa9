"""The shapes the GPU check runs at, and how a check reports its result to the entry script.

Two shapes: `gpu` (the real check on one H200: Llama-3.1-8B's shape in bf16, prefill 128 to 8,192
tokens, decode batches 1 to 256 at contexts 512 to 8,192) and `tiny` (the CPU dry run: the same
code paths at a shape a 2-core machine runs in seconds). Every check is a child process of
check.py; it prints its result as one `CHECK_RESULT {json}` line, last.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TINY_MODEL_YAML = HERE / "tiny_model.yaml"
RESULT_PREFIX = "CHECK_RESULT "


@dataclass(frozen=True)
class Shape:
    """What one run of the check measures (model names are pdsim catalog names or YAML paths)."""

    name: str
    serve_model: str  # pdreal node.model: catalog name or YAML path (random weights)
    sim_model: str  # pdsim model= group for the measured-model comparison and the fidelity loop
    sim_model_overrides: tuple[str, ...]  # pdsim model.* fields making sim_model equal serve_model
    dtype: str  # profile and PD dtype (the attention and greedy checks set their own)
    greedy_model: str  # the model whose greedy tokens must equal on CPU and on the device
    greedy_tokens: int
    prefill_tokens: tuple[int, ...]
    decode_seqs: tuple[int, ...]
    decode_context: tuple[int, ...]
    kv_budget_tokens: int  # profile cells needing more KV are skipped (and listed)
    repeats: int
    pd_requests: int
    pd_rate_rps: float
    pd_input: tuple[int, int]
    pd_output: tuple[int, int]
    pd_serve: tuple[str, ...] = field(default_factory=tuple)  # extra pdreal serve overrides
    # pdreal profile grid flags on top of --quick for the PD loop: cover the batches the replay
    # reaches (quick alone stops at 2 x 256 prompt tokens; the H200 run of 2026-11-29 served 5,500)
    pd_profile_grid: tuple[str, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


GPU = Shape(
    name="gpu", serve_model="llama3_8b", sim_model="llama3_8b", sim_model_overrides=(), dtype="bf16",
    greedy_model="smollm2_135m", greedy_tokens=24,
    prefill_tokens=(128, 512, 1024, 2048, 4096, 8192), decode_seqs=(1, 8, 32, 64, 128, 256),
    decode_context=(512, 2048, 8192), kv_budget_tokens=560_000, repeats=3,
    pd_requests=40, pd_rate_rps=4.0, pd_input=(128, 1024), pd_output=(16, 64),
    pd_serve=("node.num_pages=4096", "node.threads=4", "cluster.page_size_tokens=16"),
    pd_profile_grid=("--prefill-seqs", "1,2,4,8", "--prefill-tokens", "128,256,512,1024", "--decode-seqs",
                     "1,4,8,16,32,48,64", "--decode-context", "256,512,1024"),
)

TINY = Shape(
    name="tiny", serve_model=str(TINY_MODEL_YAML), sim_model="smollm2_135m",
    sim_model_overrides=("model.num_layers=2", "model.hidden_size=64", "model.num_heads=4",
                         "model.num_kv_heads=2", "model.head_dim=16", "model.ffn_size=128",
                         "model.vocab_size=512", "model.tied_embeddings=false", "model.dtype=fp32"),
    dtype="fp32", greedy_model=str(TINY_MODEL_YAML), greedy_tokens=8,
    prefill_tokens=(16, 64), decode_seqs=(1, 4), decode_context=(32, 128), kv_budget_tokens=4096, repeats=1,
    pd_requests=4, pd_rate_rps=4.0, pd_input=(8, 24), pd_output=(2, 6),
    pd_serve=("node.num_pages=256",),
    pd_profile_grid=("--prefill-seqs", "1,2", "--decode-seqs", "1,2,4"),
)

SHAPES = {s.name: s for s in (GPU, TINY)}


def emit(status: str, summary: str, **extra: Any) -> None:
    """Print a check's result line: status ok | fail | skip | error, one markdown summary."""
    print(RESULT_PREFIX + json.dumps({"status": status, "summary": summary, **extra}, default=str), flush=True)


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A markdown table of `rows` (floats to 4 significant digits)."""
    def cell(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
