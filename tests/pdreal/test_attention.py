"""The grouped torch backend equals the old per-chunk reference (kept here as `LoopAttention`),
runs every call on SDPA's fused kernel, and plans one call per group."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from pdreal.attention.base import AttentionBackend  # noqa: E402
from pdreal.attention.torch_ref import (  # noqa: E402
    DEFAULT_GATHER_BUDGET_BYTES,
    TorchAttention,
    gather_budget_for,
    split_run,
)
from pdreal.kv.pool import KVLayout, KVPool  # noqa: E402
from pdreal.model.batch import ForwardBatch, SeqChunk  # noqa: E402
from pdreal.model.spec import LlamaSpec  # noqa: E402
from pdreal.model.weights import random_model  # noqa: E402

PAGE = 4


class LoopAttention(AttentionBackend):
    """The backend as it was before issue 22: one SDPA call per chunk on 3-D tensors with a
    boolean mask (the math kernel), K/V gathered per chunk and copied per grouped head."""

    name = "loop"

    def plan(self, batch: ForwardBatch, num_heads: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> None:
        self._batch, self._group = batch, num_heads // num_kv_heads
        self._kv_slots, self._masks = [], []
        offsets = torch.arange(batch.page_size_tokens)
        for q_len, kv_len, table in zip(batch.q_lens, batch.kv_lens, batch.page_tables, strict=True):
            pages = torch.tensor(table, dtype=torch.long)
            self._kv_slots.append((pages[:, None] * batch.page_size_tokens + offsets).reshape(-1)[:kv_len])
            q_pos = torch.arange(kv_len - q_len, kv_len)
            self._masks.append(None if q_len == 1 else torch.arange(kv_len)[None, :] <= q_pos[:, None])

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                pool: KVPool) -> torch.Tensor:
        pool.write(layer, self._batch.slots, k, v)
        kv_shape = (-1, pool.layout.num_kv_heads, pool.layout.head_dim)
        k_flat, v_flat = pool.k_cache(layer).reshape(kv_shape), pool.v_cache(layer).reshape(kv_shape)
        out, start = torch.empty_like(q), 0
        for i, q_len in enumerate(self._batch.q_lens):
            keys = k_flat.index_select(0, self._kv_slots[i]).transpose(0, 1).repeat_interleave(self._group, 0)
            values = v_flat.index_select(0, self._kv_slots[i]).transpose(0, 1).repeat_interleave(self._group, 0)
            query = q[start:start + q_len].transpose(0, 1)
            attn = F.scaled_dot_product_attention(query, keys, values, attn_mask=self._masks[i])
            out[start:start + q_len] = attn.transpose(0, 1)
            start += q_len
        return out


def pool_with_history(kv_heads: int, head_dim: int, seed: int) -> KVPool:
    """One layer, 32 pages of 4 tokens, every slot holding random K/V (the cached prefixes)."""
    pool = KVPool(KVLayout(1, 32, PAGE, kv_heads, head_dim, 4), torch.float32)
    pool.buffer.normal_(generator=torch.Generator().manual_seed(seed))
    return pool


def attend(backend: AttentionBackend, chunks: list[SeqChunk], heads: int, kv_heads: int,
           head_dim: int = 8) -> tuple[torch.Tensor, KVPool]:
    batch = ForwardBatch.build(chunks, PAGE, "cpu")
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(batch.num_tokens, heads, head_dim, generator=gen)
    k = torch.randn(batch.num_tokens, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch.num_tokens, kv_heads, head_dim, generator=gen)
    pool = pool_with_history(kv_heads, head_dim, seed=2)
    backend.plan(batch, heads, kv_heads, head_dim, torch.float32)
    return backend.forward(0, q, k, v, pool), pool


# Non-contiguous page tables, listed out of order: the gather must follow them.
T = [[3, 9, 4], [17, 2, 30, 11], [6, 5], [20, 21, 22, 23, 24], [0, 12, 13], [7, 8], [25, 26], [1, 10]]
BATCHES = {
    "fresh_equal": [SeqChunk([1] * 7, 0, T[0]), SeqChunk([2] * 7, 0, T[1])],
    "fresh_ragged": [SeqChunk([1] * 9, 0, T[0]), SeqChunk([2] * 3, 0, T[1]), SeqChunk([3] * 8, 0, T[2])],
    "prefix_mid_page": [SeqChunk([1] * 5, 6, T[1]), SeqChunk([2] * 5, 6, T[3])],  # starts at offset 2
    "prefix_ragged": [SeqChunk([1] * 3, 9, T[3]), SeqChunk([2] * 6, 1, T[0]), SeqChunk([3], 0, T[2])],
    "decode_equal": [SeqChunk([i], 10, T[i]) for i in (0, 1, 4)],
    "decode_ragged": [SeqChunk([1], 10, T[0]), SeqChunk([2], 3, T[2]), SeqChunk([3], 17, T[3]),
                      SeqChunk([4], 0, T[7])],
    "mixed": [SeqChunk([1] * 6, 0, T[4]), SeqChunk([2] * 4, 7, T[1]), SeqChunk([3], 14, T[3]),
              SeqChunk([4], 5, T[5]), SeqChunk([5] * 2, 0, T[6]), SeqChunk([6], 1, T[7])],
}


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (3, 3), (4, 1)], ids=["gqa", "mha", "mqa"])
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_grouped_backend_equals_the_per_chunk_reference(name: str, heads: int, kv_heads: int) -> None:
    expected, expected_pool = attend(LoopAttention(), BATCHES[name], heads, kv_heads)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises if any call needs the math kernel
        got, pool = attend(TorchAttention(), BATCHES[name], heads, kv_heads)
    torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)
    assert torch.equal(pool.buffer, expected_pool.buffer)  # the same new K/V written at the same slots


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_old_reference_needs_the_math_kernel() -> None:
    """The guard above can fail: the per-chunk 3-D calls have no fused kernel on CPU."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError):
        attend(LoopAttention(), BATCHES["prefix_mid_page"], 6, 2)


def test_groups_are_runs_of_one_call_each() -> None:
    backend = TorchAttention()
    plans = {}
    for name, chunks in BATCHES.items():
        backend.plan(ForwardBatch.build(chunks, PAGE, "cpu"), 6, 2, 8, torch.float32)
        plans[name] = [(g.first_chunk, g.num_seqs, g.q_len, g.kv_len, g.fresh, g.is_causal, g.mask is not None)
                       for g in backend.groups]
    assert plans["fresh_equal"] == [(0, 2, 7, 7, True, True, False)]
    assert plans["decode_equal"] == [(0, 3, 1, 11, False, False, False)]
    assert plans["decode_ragged"] == [(0, 4, 1, 18, False, False, True)]  # padded to the longest
    assert plans["prefix_mid_page"] == [(0, 2, 5, 11, False, False, True)]
    assert plans["mixed"] == [(0, 1, 6, 6, True, True, False), (1, 1, 4, 11, False, False, True),
                              (2, 2, 1, 15, False, False, True), (4, 1, 2, 2, True, True, False),
                              (5, 1, 1, 2, False, False, False)]


def test_ragged_decode_padding_reads_only_real_keys() -> None:
    """A padded context's masked keys point at its own first slot; its output ignores them."""
    backend = TorchAttention()
    chunks = BATCHES["decode_ragged"]
    backend.plan(ForwardBatch.build(chunks, PAGE, "cpu"), 6, 2, 8, torch.float32)
    mask = backend.groups[0].mask
    assert mask is not None and mask.shape == (4, 1, 1, 18)
    assert [int((mask[i] == 0).sum()) for i in range(4)] == [11, 4, 18, 1]


def test_model_forward_steps_equal_the_reference() -> None:
    """A tiny GQA model over mixed prefill/decode steps: logits equal the reference backend's."""
    spec = LlamaSpec("tiny-gqa6", num_layers=2, hidden_size=48, num_heads=6, num_kv_heads=2, head_dim=8,
                     ffn_size=64, vocab_size=89)
    model = random_model(spec, seed=5)
    steps = [
        [SeqChunk(list(range(1, 8)), 0, T[3]), SeqChunk(list(range(3, 9)), 0, T[1])],
        [SeqChunk(list(range(9, 14)), 7, T[3]), SeqChunk([5], 6, T[1]), SeqChunk([4, 4, 4], 0, T[2])],
        [SeqChunk([7], 12, T[3]), SeqChunk([8], 7, T[1]), SeqChunk([2], 3, T[2])],
    ]
    logits = {}
    for backend in (LoopAttention(), TorchAttention()):
        pool = KVPool(KVLayout(2, 32, PAGE, 2, 8, 4), torch.float32)
        logits[backend.name] = [model.forward(ForwardBatch.build(s, PAGE, "cpu"), pool, backend) for s in steps]
    for ref, got in zip(logits["loop"], logits["torch"], strict=True):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_one_backend_across_batches_of_every_size() -> None:
    """The gather workspace grows and is reused (larger, then smaller batches): same outputs."""
    backend = TorchAttention()
    for name in ["decode_equal", "decode_ragged", "prefix_mid_page", "mixed", "decode_equal", "prefix_ragged"]:
        expected, _ = attend(LoopAttention(), BATCHES[name], 6, 2)
        got, _ = attend(backend, BATCHES[name], 6, 2)
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)


def test_groups_over_the_gather_budget_split_into_whole_sequences() -> None:
    """A budget of 3 sequences' K/V cuts a 4-decode run into 2 + 2 and each part pads only to its
    own longest context; the outputs still equal the reference, one SDPA call per part."""
    chunks = BATCHES["decode_ragged"]  # contexts 11, 4, 18, 1
    per_seq_bytes = 2 * 2 * 18 * 8 * 4  # K and V, 2 KV heads, 18 tokens, head_dim 8, fp32
    backend = TorchAttention(gather_budget_bytes=3 * per_seq_bytes)
    backend.plan(ForwardBatch.build(chunks, PAGE, "cpu"), 6, 2, 8, torch.float32)
    assert [(g.first_chunk, g.num_seqs, g.kv_len, g.gather_start) for g in backend.groups] == [
        (0, 2, 11, 0), (2, 2, 18, 22)]
    expected, _ = attend(LoopAttention(), chunks, 6, 2)
    for budget in (1, 3 * per_seq_bytes, 1 << 30):  # one sequence per call, two calls, one call
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            got, _ = attend(TorchAttention(gather_budget_bytes=budget), chunks, 6, 2)
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)


def test_split_run_makes_near_equal_parts() -> None:
    assert split_run(3, 16, 5) == [(3, 4), (7, 4), (11, 4), (15, 4)]
    assert split_run(0, 5, 2) == [(0, 2), (2, 2), (4, 1)]
    assert split_run(0, 5, 0) == [(i, 1) for i in range(5)]
    assert split_run(2, 3, 10) == [(2, 3)]
    with pytest.raises(ValueError, match="gather_budget_bytes"):
        TorchAttention(gather_budget_bytes=0)


def test_fresh_prompts_are_never_split() -> None:
    """Equal fresh prompts gather nothing: one call however small the budget."""
    backend = TorchAttention(gather_budget_bytes=1)
    backend.plan(ForwardBatch.build(BATCHES["fresh_equal"], PAGE, "cpu"), 6, 2, 8, torch.float32)
    assert [(g.num_seqs, g.fresh) for g in backend.groups] == [(2, True)]


def test_the_gather_budget_follows_the_device() -> None:
    """8 MiB of CPU cache on `cpu`; 1 GiB on a GPU, where the 8 MiB budget cut a 40-sequence
    Llama-3.1-8B decode batch into one call per sequence and layer (2-3 s a step on an H200)."""
    from pdreal.attention import make_backend

    assert gather_budget_for("cpu") == DEFAULT_GATHER_BUDGET_BYTES == 8 << 20
    assert gather_budget_for("cuda") == gather_budget_for("cuda:1") == 1 << 30
    cpu, gpu = make_backend("torch", "cpu"), make_backend("torch", "cuda:0")
    assert isinstance(cpu, TorchAttention) and isinstance(gpu, TorchAttention)
    assert (cpu.gather_budget_bytes, gpu.gather_budget_bytes) == (8 << 20, 1 << 30)
    pages = -(-1100 // PAGE)  # 40 decodes at 1,100 tokens of context each, own pages
    chunks = [SeqChunk([7], 1099, list(range(i * pages, (i + 1) * pages))) for i in range(40)]
    batch = ForwardBatch.build(chunks, PAGE, "cpu")
    for backend, calls in ((cpu, 40), (gpu, 1)):  # 4.5 MB of K/V a sequence at Llama-3.1-8B's shape
        backend.plan(batch, 32, 8, 128, torch.bfloat16)
        assert len(backend.groups) == calls
