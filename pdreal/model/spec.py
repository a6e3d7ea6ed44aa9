"""The model shape the engine builds (a Llama-family decoder), derived from pdsim's ModelConfig."""

from __future__ import annotations

from dataclasses import dataclass

from pdsim.config import ModelConfig


@dataclass(frozen=True, slots=True)
class LlamaSpec:
    """Shape and constants of a Llama-family model (RMSNorm, RoPE, GQA attention, SwiGLU)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    tied_embeddings: bool = False
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    eos_token_ids: tuple[int, ...] = ()
    context_length: int = 0  # trained context (prompt + output tokens); 0 = unknown (the KV pool bounds it)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"model {self.name}: field {name!r} must be >= 1, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model {self.name}: num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_model_config(cls, model: ModelConfig, rope_theta: float = 10000.0) -> LlamaSpec:
        """The dense-Llama part of a catalog entry; MoE and MLA shapes are refused."""
        if model.num_experts > 0 or model.kv_lora_rank > 0 or not model.gated_ffn:
            raise ValueError(f"model {model.name}: pdreal builds dense SwiGLU GQA models only")
        return cls(
            name=model.name,
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_heads=model.num_heads,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            ffn_size=model.ffn_size,
            vocab_size=model.vocab_size,
            tied_embeddings=model.tied_embeddings,
            rope_theta=rope_theta,
        )


def catalog_spec(name_or_path: str, rope_theta: float = 10000.0) -> LlamaSpec:
    """A spec from the model catalog (`scenarios/model/<name>.yaml`) or a YAML path."""
    from pathlib import Path

    from omegaconf import DictConfig, OmegaConf

    from pdsim.paths import SCENARIOS_DIR

    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIOS_DIR / "model" / f"{name_or_path}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"model catalog entry {name_or_path!r} not found (looked at {path})")
    values = OmegaConf.load(path)
    if not isinstance(values, DictConfig):
        raise ValueError(f"{path}: a model entry is a mapping, not a list")
    values.pop("defaults", None)
    model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), values))
    if not isinstance(model, ModelConfig):
        raise TypeError(f"{path}: converted to {type(model).__name__}, expected ModelConfig")
    return LlamaSpec.from_model_config(model, rope_theta)
