"""A local cache of dequantized GGUF weights, so an instance starts in about a second.

Reading SmolLM2's GGUF costs ~7.5 s on this CPU (gguf-py parses the 49k-entry vocabulary field
by field, then dequantizes every tensor); each instance of `pdreal serve` paid it again. The
first load writes the fp32 parameters (after the Q/K un-permute) and the tokenizer beside each
other under `$PDREAL_CACHE_DIR` (default `~/.cache/pdreal`), named by the GGUF's file name, size
and modification time, so a changed file is never served stale; later loads memory-map them.
Writing is best effort (a temporary file renamed into place): a read-only home, a full disk or a
failed write only costs time, and nothing is written unless the disk keeps `HEADROOM_BYTES` free
after it. A reinstalled GGUF (a new modification time) gets a new entry; writing it removes the
entries of the same file name under older keys, so the cache holds one entry per model file name
instead of growing by ~0.5 GB on every reinstall.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pdreal.model.llama import LlamaModel

log = logging.getLogger(__name__)

HEADROOM_BYTES = 1 << 30  # a cache write never leaves less than this free on its disk
STALE_TEMP_S = 3600.0  # a writer's temporary file this old was left by a killed process


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
    """Write the cache entry of `path` (fp32 parameters + tokenizer JSON), then drop the entries of
    the same file name under older keys; every failure only logs (torch.save raises RuntimeError,
    not OSError, when the disk fills)."""
    import torch

    weights, tokenizer_file = _files(path)
    try:
        weights.parent.mkdir(parents=True, exist_ok=True)
        params = {n: p.detach().to("cpu", torch.float32).contiguous() for n, p in model.named_parameters()}
        need_bytes = sum(t.numel() * t.element_size() for t in params.values()) + HEADROOM_BYTES
        free_bytes = shutil.disk_usage(weights.parent).free
        if free_bytes < need_bytes:
            log.warning("weight cache not written to %s: %d bytes free, %d needed", weights.parent,
                        free_bytes, need_bytes)
            return
        _atomic(tokenizer_file, lambda f: f.write(tokenizer.to_str().encode()))
        _atomic(weights, lambda f: torch.save({"spec": asdict(model.spec), "params": params}, f))
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written means a slow load, never a failure
        log.warning("weight cache not written to %s: %s", weights.parent, exc)
        return
    prune_stale(path)


def prune_stale(path: Path) -> list[Path]:
    """Remove the cache files of `path`'s file name under any key but its current one (an older
    install), and its writers' temporary files older than `STALE_TEMP_S` (left by a killed
    process); returns what was removed. Failures only log."""
    current = cache_key(path)
    now_s = time.time()  # noqa: TID251 - files' ages are wall-clock, not simulated time
    entry = re.compile(rf"(\.?)({re.escape(path.stem)}-\d+-\d+)\.(?:fp32\.pt|tokenizer\.json)(?:\..+)?")
    folder = cache_dir()
    removed = []
    for file in sorted(folder.iterdir()) if folder.is_dir() else []:
        match = entry.fullmatch(file.name)
        if match is None:
            continue
        try:
            stale = (now_s - file.stat().st_mtime >= STALE_TEMP_S) if match.group(1) \
                else match.group(2) != current
            if stale:
                file.unlink()
                removed.append(file)
        except OSError as exc:
            log.warning("stale weight cache file %s not removed: %s", file, exc)
    return removed


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
