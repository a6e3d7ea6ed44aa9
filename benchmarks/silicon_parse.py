"""A measured silicon row (silicon_dev.csv's columns) as data, and the catalog it maps onto.

- MODELS: the row's `model_path` -> a catalog model (scenarios/model/<name>.yaml);
- SYSTEMS: the row's `system` -> a catalog hardware entry (scenarios/hardware/<name>.yaml);
- `parse_row`: the fields that decide a row's pdsim run, per side (Side: TP, PP, attention DP,
  MoE TP x EP, workers) as the benchmark launched it (silicon_harness.inferencex_layout);
- `load_catalog`: what this checkout has (models, hardware, operator table sets).

silicon_models.py says what a row runs on (or lacks), silicon_rows.py the run itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from silicon_harness import harness_of, inferencex_layout, measured_date, mtp_draft_tokens

# model_path -> catalog model. Instruct / quantized checkpoints share their base model's
# architecture (config.json); their quantization comes from the row's quant modes.
MODELS: dict[str, str] = {
    "Qwen/Qwen3-32B": "qwen3_32b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3_32b",
    "meta-llama/Llama-3.1-70B": "llama3_70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3_8b",
    "deepseek-ai/DeepSeek-V3": "deepseek_v3",
    "deepseek-ai/DeepSeek-R1": "deepseek_v3",  # same architecture as V3 (config.json)
    "nvidia/DeepSeek-R1-NVFP4": "deepseek_v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek_v3",
    "openai/gpt-oss-120b": "gpt_oss_120b",
    "moonshotai/Kimi-K2.5": "kimi_k25",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3_235b_a22b",
    "MiniMaxAI/MiniMax-M2.5": "minimax_m25",
    "zhipuai/GLM-5": "glm5",
    "Qwen/Qwen3.5-397B-A17B": "qwen35_397b_a17b",
}


# silicon system -> catalog hardware (the operator tables of that GPU: hardware.op_tables)
SYSTEMS: dict[str, str] = {"h100_sxm": "h100", "b200_sxm": "b200", "h200_sxm": "h200", "b300_sxm": "b300",
                           "gb200": "gb200", "gb300": "gb300"}


@dataclass(frozen=True)
class Side:
    """One engine shape: tensor parallel size and the parallelism pdsim does not model yet."""

    tp: int
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    workers: int = 1


@dataclass(frozen=True)
class SiliconRow:
    """The fields of one measured row that decide its pdsim run (and the measured latencies)."""

    id: str
    model_path: str
    system: str
    backend: str
    backend_version: str
    mode: str  # agg | disagg
    isl_tokens: int
    osl_tokens: int
    concurrency: int  # closed-loop clients (0 = the row does not say)
    precision: str
    gemm_quant: str
    moe_quant: str
    agg: Side | None
    prefill: Side | None
    decode: Side | None
    measured_ttft_ms: float
    measured_tpot_ms: float
    harness: str = "aiperf"  # the benchmark client that measured it: HARNESSES
    measured: str = ""  # measurement date (YYYY-MM-DD) from silicon_data_source, "" where none
    mtp_draft_tokens: int = 0  # speculative decoding the run used, where its image says (MTP_IMAGES)


@dataclass(frozen=True)
class RowPlan:
    """The pdsim run of a row: hydra overrides over config.yaml, or the features it lacks."""

    row: SiliconRow
    overrides: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    note: str = ""  # e.g. which table version stands in for the row's engine version

    @property
    def supported(self) -> bool:
        return not self.missing


@dataclass
class Catalog:
    """What pdsim has: catalog models (with their dtype and MoE-ness) and operator table sets."""

    models: dict[str, tuple[str, bool]]  # name -> (dtype, is_moe)
    hardware: set[str]
    table_sets: list[str]  # "<system>_<engine>_<version>"
    hardware_tables: dict[str, str] = field(default_factory=dict)  # hardware -> op_tables system


def _int(value: str) -> int:
    return int(float(value)) if value.strip() else 0


def _side(raw: dict[str, str], prefix: str) -> Side | None:
    tp = _int(raw.get(f"{prefix}tp_size", ""))
    if tp <= 0:
        return None
    get = lambda name: _int(raw.get(f"{prefix}{name}", "")) or 1  # noqa: E731
    workers = _int(raw.get(f"{prefix}num_workers", "")) if prefix else 1
    return Side(tp, get("pp_size"), get("attention_dp_size"), get("moe_tp_size"), get("moe_ep_size"), workers)


def _agg_side(raw: dict[str, str]) -> Side | None:
    """An aggregated row's engine; an InferenceX row's as its launch script ran it (inferencex_layout)."""
    side = _side(raw, "") if raw["mode"] == "agg" else None
    if side is None or harness_of(raw.get("silicon_data_source", "")) != "inferencex":
        return side
    tp, dp, moe_tp, moe_ep = inferencex_layout(raw["backend"], side.tp, side.attention_dp, side.moe_tp, side.moe_ep)
    return replace(side, tp=tp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep)


def concurrency_of(raw: dict[str, str]) -> int:
    """Client concurrency: `silicon_concurrency=` in silicon_data_source, else batch_size (agg)."""
    found = re.search(r"silicon_concurrency=(\d+)", raw.get("silicon_data_source", ""))
    if found:
        return int(found.group(1))
    return _int(raw.get("batch_size", "")) if raw.get("mode") == "agg" else 0


def parse_row(raw: dict[str, str]) -> SiliconRow:
    """One CSV row (silicon_dev.csv's header) as a SiliconRow; ValueError names the bad field."""
    try:
        agg, source = _agg_side(raw), raw.get("silicon_data_source", "")
        return SiliconRow(
            id=raw["id"], model_path=raw["model_path"], system=raw["system"], backend=raw["backend"],
            backend_version=raw.get("backend_version", ""), mode=raw["mode"],
            isl_tokens=_int(raw["isl"]), osl_tokens=_int(raw["osl"]), concurrency=concurrency_of(raw),
            precision=raw.get("precision", ""), gemm_quant=raw.get("gemm_quant_mode", ""),
            moe_quant=raw.get("moe_quant_mode", ""),
            agg=agg,
            prefill=_side(raw, "prefill_"), decode=_side(raw, "decode_"),
            measured_ttft_ms=float(raw.get("silicon_ttft_ms") or "nan"),
            measured_tpot_ms=float(raw.get("silicon_tpot_ms") or "nan"),
            harness=harness_of(source),
            measured=measured_date(source),
            mtp_draft_tokens=mtp_draft_tokens(raw["backend"], raw["model_path"], source,
                                              agg.attention_dp if agg is not None else 1),
        )
    except KeyError as exc:
        raise ValueError(f"row {raw.get('id', '?')}: missing column {exc.args[0]}") from None
    except ValueError as exc:
        raise ValueError(f"row {raw.get('id', '?')}: {exc}") from None


def load_catalog() -> Catalog:
    """pdsim's catalog models, hardware and operator table sets, read from this checkout."""
    from pdsim.perf import catalog, spec
    from pdsim.perf.optables import table_sets

    models = {}
    for name in catalog.catalog_names("model"):
        m = catalog.load_model(name)
        models[name] = (m.dtype, spec.is_moe(m))
    hardware = set(catalog.catalog_names("hardware"))
    tables = {name: catalog.load_hardware(name).op_tables for name in hardware}
    return Catalog(models, hardware, table_sets(), tables)
