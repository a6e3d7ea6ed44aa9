"""Measured per-operator latency tables (pdsim/perf/data, sources in data/SOURCES.md).

One *table set* is one (system, engine, version) folder under data/aic/ holding, in ms:

- `gemm.csv` (m, n, k): a bf16 GEMM of an m x k activation by a k x n weight; `gemm_<quant>.csv`
  the same under a quant mode (fp8 per-tensor, fp8_block, nvfp4: the sets of extract_quant.py,
  which are gzipped, `.csv.gz`);
- `context_attention.csv` (batch_size, isl, num_heads, num_key_value_heads): causal attention
  of `batch_size` prompts of `isl` tokens each, head_dim 128, one layer, heads of one rank;
- `generation_attention.csv` (batch_size, step, ...): one decode token per sequence against a
  KV cache of `step` tokens (bf16; `generation_attention_fp8.csv`: an fp8 KV cache);
- `allreduce.csv` (num_gpus, message_size): one all-reduce of `message_size` bf16 elements;
- `mla_context.csv` / `mla_generation.csv` (batch_size, isl | step, num_heads): DeepSeek-V3's
  multi-head latent attention with its 128 heads split over TP ranks (num_heads per rank);
- `moe.csv` (moe_dtype, hidden_size, inter_size, topk, num_experts, moe_tp_size, num_tokens):
  one fused MoE layer (balanced routing, experts split by TP, no EP); the quantized sets add
  moe_ep_size and distribution ("balanced", "power_law_1.01"): `OpTables.moe_grid`;
- quantized sets (extract_moe.py): `mla_context_fp8` / `mla_generation_fp8` (fp8 KV cache) and,
  for vLLM, `mla_{context,generation}_module[_fp8]` (the whole attention module, projections
  included: `load_mla`); `mla_bmm` (MLA decode's absorbed BMMs: `load_mla_bmm`); `nccl` (op,
  num_gpus, message_bytes): NCCL collectives (`OpTables.collective`).

`LogGrid` and `HeadTables` (loggrid.py) interpolate the tables.
`vidur_ops.csv` holds Vidur's per-op times (Llama-2, vLLM-era) used for the elementwise kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd
from packaging.version import InvalidVersion, Version

from pdsim.perf.loggrid import HeadTables, LogGrid

DATA_DIR = Path(__file__).parent / "data"
AIC_DIR = DATA_DIR / "aic"
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add",
                   "add")  # two residual adds per layer, Vidur times one
VIDUR_HIDDEN = 8192  # Llama-2-70B, whose Vidur rows stand for every model (scaled by hidden size)
VIDUR_HBM_GBPS = {"a100": 2039.0, "h100": 3350.0}  # the GPUs Vidur profiled (catalog datasheets)

# engine_version "" means these where the GPU has them: the sets pdsim's bf16 results were built
# on (extract.py); the newer sets (extract_quant.py) come in by naming their version, on GPUs the
# defaults do not cover, or when a model needs a table only they have (a quant mode, fp8 KV).
DEFAULT_VERSIONS = {"sglang": "0.5.10", "vllm": "0.14.0"}
DEFAULT_MOE_DISTRIBUTION = "balanced"  # the older sets' only routing
COLLECTIVES = ("all_gather", "reduce_scatter", "alltoall", "all_reduce")
MoeShape = tuple[int, int, int, int]  # hidden_size, expert inter_size, top-k, routed experts

@dataclass(frozen=True, eq=False)
class OpTables:
    """Every table of one (system, engine, version)."""

    source: str
    gemm: LogGrid
    context_attention: HeadTables
    generation_attention: HeadTables
    allreduce: dict[int, LogGrid]  # by num_gpus
    moe: pd.DataFrame  # raw rows; moe_grid picks a shape
    mla_context: HeadTables | None = None  # MLA attention by query heads per rank (KV: 1 latent), bf16 KV
    mla_generation: HeadTables | None = None
    nccl: pd.DataFrame = field(default_factory=pd.DataFrame)  # raw rows; collective picks an op
    _memo: dict = field(default_factory=dict, repr=False)  # moe_grid's and collective's grids

    def moe_grid(self, dtype: str, shape: MoeShape, moe_tp: int, moe_ep: int = 1,
                 distribution: str = DEFAULT_MOE_DISTRIBUTION) -> LogGrid | None:
        """One fused MoE layer (ms) over num_tokens, experts split moe_tp x moe_ep ways; None
        where the set never measured that dtype, shape, split and routing."""
        key = ("moe", dtype, *shape, moe_tp, moe_ep, distribution)
        if key not in self._memo:
            hidden, inter, topk, experts = shape
            df = self.moe
            rows = df[(df.moe_dtype == dtype) & (df.hidden_size == hidden) & (df.inter_size == inter)
                      & (df.topk == topk) & (df.num_experts == experts) & (df.moe_tp_size == moe_tp)
                      & (df.moe_ep_size == moe_ep) & (df.distribution == distribution)] if len(df) else df
            self._memo[key] = LogGrid.from_frame(rows, ("num_tokens",), "moe") if len(rows) else None
        return self._memo[key]

    def collective(self, op: str) -> dict[int, LogGrid]:
        """NCCL `op` (one of COLLECTIVES) by num_gpus: ms over message_bytes; {} where the set
        has no nccl table."""
        if op not in COLLECTIVES:
            raise ValueError(f"perf: unknown collective {op!r} (have {list(COLLECTIVES)})")
        if op not in self._memo:
            rows = self.nccl[self.nccl.op == op] if len(self.nccl) else pd.DataFrame(columns=["num_gpus"])
            self._memo[op] = {int(g): LogGrid.from_frame(part, ("message_bytes",), f"{self.source} {op}")
                              for g, part in rows.groupby("num_gpus")}
        return self._memo[op]


def table_sets() -> list[str]:
    """Available table sets, e.g. 'h100_sxm_sglang_0.5.10'."""
    return sorted(p.name for p in AIC_DIR.iterdir() if p.is_dir())


def system_of_set(name: str) -> str:
    """The GPU system a table set was measured on: its name less its engine and version."""
    return name.rsplit("_", 2)[0]


def sets_of_system(system: str) -> list[str]:
    """The table sets measured on one GPU system."""
    return [s for s in table_sets() if system_of_set(s) == system]


def release_before(version: str, cutoff: str) -> bool:
    """`version` is a numbered release (0.19.0, 1.3.0rc20, PEP 440) older than `cutoff`; a nightly
    or an unstated version is not."""
    limit = Version(cutoff)  # a malformed cut-off raises InvalidVersion, naming it
    try:
        return Version(version) < limit
    except InvalidVersion:
        return False


def table_file(folder: Path, stem: str) -> Path | None:
    """`stem`.csv, or `stem`.csv.gz (the sets extract_quant.py writes), if the folder has one."""
    for name in (f"{stem}.csv", f"{stem}.csv.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def resolve_set(system: str, engine: str, version: str, needs: Sequence[str] = ()) -> str:
    """The table set of (system, engine) that has every table named in `needs` (file stems such
    as 'gemm_fp8'): `version` where that set qualifies, else the newest that does. "" = the
    engine's DEFAULT_VERSIONS entry (then the same rule). A version no set of the engine has, or
    no qualifying set at all, is an error."""
    prefix = f"{system}_{engine}_"
    version = version or DEFAULT_VERSIONS.get(engine, "")
    known = {s.rsplit("_", 1)[1] for s in table_sets() if f"_{engine}_" in s}
    if version and version not in known:
        raise ValueError(f"perf: field 'engine_version' has unknown value {version!r} for engine "
                         f"{engine!r} (have {sorted(known)})")
    found = [s for s in table_sets() if s.startswith(prefix)
             and all(table_file(AIC_DIR / s, stem) for stem in needs)]
    if not found:
        raise ValueError(
            f"perf: no measured tables for system={system!r} engine={engine!r}"
            f"{' with ' + ', '.join(needs) if needs else ''} (this system has "
            f"{[s for s in table_sets() if s.startswith(system + '_')]})"
        )
    if prefix + version in found:
        return prefix + version
    return max(found, key=lambda s: _set_version(s, len(prefix)))


def _set_version(table_set: str, prefix_chars: int) -> Version:
    """A table set's engine version (its name past `prefix_chars`) in PEP 440's order, the one
    release_before uses: 1.3.0rc20 comes before 1.3.0, 0.9.0 before 0.14.0."""
    try:
        return Version(table_set[prefix_chars:])
    except InvalidVersion as exc:
        raise ValueError(f"perf: table set {table_set!r} (under {AIC_DIR}) has no PEP 440 version") from exc


def _read(folder: Path, stem: str) -> pd.DataFrame:
    path = table_file(folder, stem)
    if path is None:
        raise ValueError(f"perf: table set {folder.name} has no {stem}.csv")
    return pd.read_csv(path)


@cache
def load_tables(name: str) -> OpTables:
    """One table set by folder name (cached: the tables are read-only)."""
    folder = AIC_DIR / name
    comm = _read(folder, "allreduce")
    moe_path, nccl_path = table_file(folder, "moe"), table_file(folder, "nccl")

    def mla(phase: str, axis: str) -> HeadTables | None:
        path = table_file(folder, f"mla_{phase}")
        if path is None:
            return None
        return HeadTables.from_frame(pd.read_csv(path).assign(num_key_value_heads=1), axis, name)
    return OpTables(
        source=name,
        gemm=LogGrid.from_frame(_read(folder, "gemm"), ("m", "n", "k"), f"{name} gemm"),
        context_attention=HeadTables.from_frame(_read(folder, "context_attention"), "isl", name),
        generation_attention=HeadTables.from_frame(_read(folder, "generation_attention"), "step", name),
        allreduce={int(g): LogGrid.from_frame(part, ("message_size",), f"{name} allreduce")
                   for g, part in comm.groupby("num_gpus")},
        moe=_moe_rows(pd.read_csv(moe_path)) if moe_path else pd.DataFrame(),
        mla_context=mla("context", "isl"),
        mla_generation=mla("generation", "step"),
        nccl=pd.read_csv(nccl_path) if nccl_path else pd.DataFrame(),
    )


def with_moe_of(tables: OpTables, moe_table_set: str) -> OpTables:
    """`tables` with the fused-MoE rows of `moe_table_set` (perf.moe_table_set: a set of the same
    GPU; "" = its own): the kernel's measurements where the engine's own set lacks them."""
    if not moe_table_set or moe_table_set == tables.source:
        return tables
    system = system_of_set(tables.source)
    same_gpu = sets_of_system(system)
    if moe_table_set not in same_gpu:
        raise ValueError(f"perf: field 'moe_table_set' has unknown value {moe_table_set!r} for {system} "
                         f"(have {same_gpu})")
    return dataclasses.replace(tables, moe=load_tables(moe_table_set).moe, _memo={})


def moe_fallback_of(tables: OpTables, stem: str) -> OpTables | None:
    """`tables` with the fused-MoE rows of its set's table `stem` (perf.moe_fallback_table: a
    kernel the engine falls back to for small batches); None for stem ""."""
    if not stem:
        return None
    path = table_file(AIC_DIR / tables.source, stem)
    if path is None or not stem.startswith("moe"):
        raise ValueError(f"perf: field 'moe_fallback_table' has unknown value {stem!r}: table set "
                         f"{tables.source} has no fused-MoE table of that name")
    return dataclasses.replace(tables, moe=_moe_rows(pd.read_csv(path)), _memo={})


def _moe_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The older sets' moe.csv has neither EP nor routing columns: no EP, balanced."""
    if "moe_ep_size" not in df:
        df = df.assign(moe_ep_size=1)
    if "distribution" not in df:
        df = df.assign(distribution=DEFAULT_MOE_DISTRIBUTION)
    return df


@cache
def load_quant_gemm(name: str, quant: str) -> LogGrid:
    """The GEMM table of one quant mode (`gemm_<quant>.csv`) of a set."""
    return LogGrid.from_frame(_read(AIC_DIR / name, f"gemm_{quant}"), ("m", "n", "k"), f"{name} gemm {quant}")


@cache
def load_kv_generation(name: str, kv_dtype: str) -> HeadTables:
    """Decode attention against a KV cache of `kv_dtype` (`generation_attention_<kv>.csv`)."""
    return HeadTables.from_frame(_read(AIC_DIR / name, f"generation_attention_{kv_dtype}"), "step", name)


@cache
def load_mla(name: str, phase: str, kv_dtype: str = "bfloat16", gemm_type: str = "") -> HeadTables:
    """MLA of one phase ("context" | "generation") against a KV cache of `kv_dtype`, by query
    heads per rank: the attention kernel alone (`mla_<phase>[_fp8]`), or with `gemm_type`
    (bfloat16, fp8_block; nvfp4 on Blackwell) the whole attention module of DeepSeek-V3's
    shapes, projections included (`mla_<phase>_module[_fp8]`, the only MLA tables of the vLLM
    sets): that one stands for projections + attention, it is not added to them."""
    if phase not in ("context", "generation"):
        raise ValueError(f"perf: MLA phase must be 'context' or 'generation', got {phase!r}")
    stem = f"mla_{phase}{'_module' if gemm_type else ''}{'' if kv_dtype == 'bfloat16' else '_' + kv_dtype}"
    df = _read(AIC_DIR / name, stem)
    if gemm_type:
        if gemm_type not in set(df.gemm_type):
            raise ValueError(f"perf: {name} {stem} has no gemm_type {gemm_type!r} (has {sorted(set(df.gemm_type))})")
        df = df[df.gemm_type == gemm_type]
    return HeadTables.from_frame(df.assign(num_key_value_heads=1), "isl" if phase == "context" else "step", name)


@cache
def load_mla_bmm(name: str, op: str, bmm_dtype: str = "bfloat16") -> LogGrid:
    """MLA decode's absorbed BMM `op` ("mla_gen_pre" | "mla_gen_post"): ms over (num_tokens,
    num_heads per rank)."""
    df = _read(AIC_DIR / name, "mla_bmm")
    rows = df[(df.op == op) & (df.bmm_dtype == bmm_dtype)]
    if rows.empty:
        raise ValueError(f"perf: {name} mla_bmm has no op={op!r} bmm_dtype={bmm_dtype!r}")
    return LogGrid.from_frame(rows, ("num_tokens", "num_heads"), f"{name} mla_bmm")


@cache
def elementwise_grid(gpu: str) -> dict[int, LogGrid]:
    """Vidur's per-layer elementwise time (ms) of Llama-2-70B by TP over num_tokens."""
    df = pd.read_csv(DATA_DIR / "vidur_ops.csv")
    df = df[(df.gpu == gpu) & (df.model == "Llama-2-70b-hf")].copy()
    df["latency_ms"] = sum(df[f"{op}_ms"] for op in ELEMENTWISE_OPS)
    return {int(tp): LogGrid.from_frame(part, ("num_tokens",), f"vidur {gpu} elementwise")
            for tp, part in df.groupby("tp")}
