"""The weight cache's upkeep (pdreal/model/weight_cache.py) on a tiny model, no GGUF needed: a write
that fails (torch.save raises RuntimeError when the disk fills) or would fill the disk only logs,
and a reinstalled model file's entry replaces the old one instead of piling up beside it."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from pdreal.model import weight_cache  # noqa: E402
from pdreal.model.llama import LlamaModel  # noqa: E402
from pdreal.model.spec import LlamaSpec  # noqa: E402

SPEC = LlamaSpec(name="tiny", num_layers=1, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                 ffn_size=16, vocab_size=3)


def tiny() -> tuple[LlamaModel, object]:
    model = LlamaModel(SPEC)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.rand(param.shape, generator=generator))
    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    return model, tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))


@pytest.fixture
def gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PDREAL_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny.Q4.gguf"
    path.write_bytes(b"x" * 64)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    return path


def names() -> list[str]:
    return sorted(p.name for p in weight_cache.cache_dir().iterdir())


def test_a_reinstall_replaces_the_old_entry(gguf: Path) -> None:
    model, tokenizer = tiny()
    weight_cache.store(gguf, model, tokenizer)
    assert names() == ["tiny.Q4-64-1000000000.fp32.pt", "tiny.Q4-64-1000000000.tokenizer.json"]
    loaded, _ = weight_cache.load_cached(gguf)
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), model.parameters(), strict=True))
    folder = weight_cache.cache_dir()
    (folder / "other-64-1.fp32.pt").write_bytes(b"another model's entry")
    fresh_temp, old_temp = folder / ".tiny.Q4-64-1000000000.fp32.pt.abc", folder / ".tiny.Q4-64-5.fp32.pt.xyz"
    fresh_temp.write_bytes(b"a writer at work")
    old_temp.write_bytes(b"left by a killed writer")
    os.utime(old_temp, (1.0, 1.0))
    os.utime(gguf, ns=(2_000_000_000, 2_000_000_000))  # reinstalled: same name and size, new time
    assert weight_cache.load_cached(gguf) is None
    weight_cache.store(gguf, model, tokenizer)
    assert names() == [fresh_temp.name, "other-64-1.fp32.pt", "tiny.Q4-64-2000000000.fp32.pt",
                       "tiny.Q4-64-2000000000.tokenizer.json"]
    assert weight_cache.load_cached(gguf) is not None


def test_a_failed_write_only_logs_and_leaves_no_weights(gguf: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    def full_disk(*_: object, **__: object) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 417753088 vs 417752976")

    monkeypatch.setattr(torch, "save", full_disk)
    with caplog.at_level(logging.WARNING, logger=weight_cache.__name__):
        weight_cache.store(gguf, *tiny())
    assert "weight cache not written" in caplog.text and "unexpected pos" in caplog.text
    assert names() == ["tiny.Q4-64-1000000000.tokenizer.json"]  # no weights, no temporary file
    assert weight_cache.load_cached(gguf) is None


def test_a_write_that_would_fill_the_disk_is_skipped(gguf: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(weight_cache.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**12, 10**12 - 5, 5))
    with caplog.at_level(logging.WARNING, logger=weight_cache.__name__):
        weight_cache.store(gguf, *tiny())
    need_bytes = sum(p.numel() * 4 for p in LlamaModel(SPEC).parameters()) + weight_cache.HEADROOM_BYTES
    assert f"5 bytes free, {need_bytes} needed" in caplog.text
    assert names() == []
