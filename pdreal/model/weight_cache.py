"""A local cache of dequantized GGUF weights, so an instance starts in about a second.

Reading SmolLM2's GGUF costs ~7.5 s on this CPU (gguf-py parses the 49k-entry vocabulary field
by field, then dequantizes every tensor); each instance of `pdreal serve` paid it again. The
first load writes the fp32 parameters (after the Q/K un-permute) and the tokenizer beside each
other under `$PDREAL_CACHE_DIR` (default `~/.cache/pdreal`), named by the GGUF's file name, size
and modification time, so a changed file is never served stale; later loads memory-map them.
Writing is best effort (a temporary file renamed into place): a read-only home only costs time.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pdreal.model.llama import LlamaModel

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    return Path(os.environ.get("PDREAL_CACHE_DIR") or Path.home() / ".cache" / "pdreal")


def cache_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.stem}-{stat.st_size}-{stat.st_mtime_ns}"


def load_cached(path: Path) -> tuple[LlamaModel, Any] | None:
    """(fp32 model on CPU, tokenizer) from the cache, or None on a miss or an unreadable entry."""
    import torch
    from tokenizers import Tokenizer

    from pdreal.model.llama import LlamaModel
    from pdreal.model.spec import LlamaSpec

    weights, tokenizer = _files(path)
    if not (weights.is_file() and tokenizer.is_file()):
        return None
    try:
        saved = torch.load(weights, mmap=True, weights_only=True)
        spec = saved["spec"]
        missing = sorted({f.name for f in fields(LlamaSpec)} - set(spec))
        if missing:  # written before LlamaSpec had these fields: rebuild it from the GGUF
            raise ValueError(f"spec fields {missing} missing")
        model = LlamaModel(LlamaSpec(**{**spec, "eos_token_ids": tuple(spec["eos_token_ids"])}))
        params = dict(model.named_parameters())
        if set(params) != set(saved["params"]):
            raise ValueError(f"parameters {sorted(set(params) ^ set(saved['params']))} differ")
        for name, value in saved["params"].items():
            params[name].data = value
        return model, Tokenizer.from_str(tokenizer.read_text())
    except Exception as exc:  # noqa: BLE001 - a bad cache entry means a slow load, never a failure
        log.warning("weight cache %s unreadable (%s): loading the GGUF", weights, exc)
        return None


def store(path: Path, model: LlamaModel, tokenizer: Any) -> None:
    """Write the cache entry of `path` (fp32 parameters + tokenizer JSON); failures only log."""
    import torch

    weights, tokenizer_file = _files(path)
    try:
        weights.parent.mkdir(parents=True, exist_ok=True)
        params = {n: p.detach().to("cpu", torch.float32).contiguous() for n, p in model.named_parameters()}
        _atomic(tokenizer_file, lambda f: f.write(tokenizer.to_str().encode()))
        _atomic(weights, lambda f: torch.save({"spec": asdict(model.spec), "params": params}, f))
    except OSError as exc:
        log.warning("weight cache not written to %s: %s", weights.parent, exc)


def load_tokenizer(path: Path) -> Any:
    """The tokenizer of the GGUF at `path`: its cached JSON (no torch, no GGUF parsing: what the
    router needs), else rebuilt from the GGUF and cached."""
    from tokenizers import Tokenizer

    from pdreal.model.gguf_loader import load_gguf_tokenizer, open_gguf

    _, tokenizer_file = _files(path)
    if tokenizer_file.is_file():
        try:
            return Tokenizer.from_str(tokenizer_file.read_text())
        except Exception as exc:  # noqa: BLE001 - a bad cache entry means a slow load, never a failure
            log.warning("cached tokenizer %s unreadable (%s): reading the GGUF", tokenizer_file, exc)
    tokenizer = load_gguf_tokenizer(open_gguf(path), path.stem)
    try:
        tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
        _atomic(tokenizer_file, lambda f: f.write(tokenizer.to_str().encode()))
    except OSError as exc:
        log.warning("tokenizer cache not written to %s: %s", tokenizer_file.parent, exc)
    return tokenizer


def _files(path: Path) -> tuple[Path, Path]:
    key = cache_key(path)
    return cache_dir() / f"{key}.fp32.pt", cache_dir() / f"{key}.tokenizer.json"


def _atomic(target: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
