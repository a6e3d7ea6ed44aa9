"""FlashInfer backend vs the torch reference (GPU only: skipped without CUDA and flashinfer)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("flashinfer backend needs CUDA", allow_module_level=True)
pytest.importorskip("flashinfer")

from pdreal.attention import make_backend  # noqa: E402
from pdreal.kv.pool import KVLayout, KVPool  # noqa: E402
from pdreal.model.batch import ForwardBatch, SeqChunk  # noqa: E402
from pdreal.model.spec import LlamaSpec  # noqa: E402
from pdreal.model.weights import random_model  # noqa: E402

SPEC = LlamaSpec("gpu-small", num_layers=2, hidden_size=512, num_heads=8, num_kv_heads=2, head_dim=64,
                 ffn_size=1024, vocab_size=1000)


def run(backend: str, steps: list[list[SeqChunk]]) -> list[torch.Tensor]:
    model = random_model(SPEC, seed=0, dtype=torch.bfloat16, device="cuda")
    pool = KVPool(KVLayout(SPEC.num_layers, 64, 16, SPEC.num_kv_heads, SPEC.head_dim, 2), torch.bfloat16, "cuda")
    attention = make_backend(backend, "cuda")
    return [model.forward(ForwardBatch.build(chunks, 16, "cuda"), pool, attention) for chunks in steps]


def test_flashinfer_matches_torch_reference_bf16() -> None:
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 1000, (n,), generator=gen).tolist() for n in (40, 7, 100)]
    tables = [list(range(0, 8)), list(range(8, 12)), list(range(20, 30))]
    steps = [
        [SeqChunk(s[:32] if len(s) > 32 else s, 0, t) for s, t in zip(seqs, tables, strict=True)],
        [SeqChunk(seqs[0][32:], 32, tables[0]), SeqChunk(seqs[2][32:], 32, tables[2])],  # chunked prefill
        [SeqChunk([1], len(s), t) for s, t in zip(seqs, tables, strict=True)],  # decode batch
    ]
    for ref, fi in zip(run("torch", steps), run("flashinfer", steps), strict=True):
        rel = (fi.float() - ref.float()).norm() / ref.float().norm()
        assert rel < 2e-2, f"relative error {rel:.3g}"
