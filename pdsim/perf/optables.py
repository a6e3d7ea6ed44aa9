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

`LogGrid` interpolates a table multilinearly in log(latency) over log(axes): exact at measured
points, power laws between them, clamped below the first point and extrapolated along the last
segment above the last one. Cells the source never measured (large batch x long context: out of
memory) are filled from a separable fit log t = row + col over each 2-D slice (table.py).
`vidur_ops.csv` holds Vidur's per-op times (Llama-2, vLLM-era) used for the elementwise kernels.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
from packaging.version import InvalidVersion, Version

from pdsim.perf.table import complete_log_additive_stack

K = TypeVar("K")  # a grid's key in LogGrid.from_frames
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

Row = tuple[list[float], list[float], list[float], list[float]]  # LogGrid.second_row: row, drow, axis, width
# LogGrid._second_third: weights and corner indices along two axes
Corners = tuple[tuple[float, float], tuple[float, float], tuple[int, int], tuple[int, int]]


@dataclass(frozen=True, slots=True, eq=False)
class LogGrid:
    """Latencies (ms) on a complete grid; __call__ interpolates in log-log space."""

    axes: tuple[list[float], ...]  # log of each axis, ascending
    log_ms: np.ndarray
    _rows: list | None = None
    _along: dict[float, Row] = field(default_factory=dict)  # second_row's memo
    _pairs: dict[tuple[float, float], Corners] = field(default_factory=dict)  # _interpolate3's memo

    @classmethod
    def from_frame(cls, df: pd.DataFrame, axes: Sequence[str], what: str) -> LogGrid:
        return cls.from_frames({0: df}, axes, what)[0]

    @classmethod
    def from_frames(cls, frames: Mapping[K, pd.DataFrame], axes: Sequence[str], what: str) -> dict[K, LogGrid]:
        """One grid per frame (median of each cell's rows); the cells no row measured, of all
        the grids at once (`_fill_missing`)."""
        measured: dict[K, tuple[tuple[np.ndarray, ...], np.ndarray]] = {}
        for key, df in frames.items():
            if df.empty:
                raise ValueError(f"no {what} rows to build a latency table from")
            ticks, codes = zip(*(np.unique(df[a].to_numpy(dtype=float), return_inverse=True) for a in axes), strict=True)
            shape = [len(t) for t in ticks]
            measured[key] = ticks, _cell_medians(np.ravel_multi_index(codes, shape),
                                                 df["latency_ms"].to_numpy(dtype=float), shape)
        filled = _fill_missing({key: grid for key, (_, grid) in measured.items()})
        return {key: cls(tuple(np.log(t).tolist() for t in ticks), np.log(filled[key]))
                for key, (ticks, _) in measured.items()}

    def __call__(self, *point: float) -> float:
        """Latency in ms at `point` (one value per axis, each > 0)."""
        if len(point) == 1:
            i, u = _segment(self.axes[0], math.log(max(point[0], 1e-9)))
            row = self.rows
            j = min(i + 1, len(row) - 1)
            return math.exp(row[i] + u * (row[j] - row[i]))
        if len(point) == 2:
            return math.exp(self._interpolate2(point[0], point[1]))
        if len(point) == 3:
            return math.exp(self._interpolate3(point[0], point[1], point[2]))
        return math.exp(self.corner_sum(point))

    def corner_sum(self, point: Sequence[float]) -> float:
        """Log latency at `point`, any number of axes: the weighted sum over the 2^n corners of
        its cell (the one- to three-axis paths above are this, specialised, bit for bit)."""
        corners = [_segment(axis, math.log(max(value, 1e-9)))
                   for axis, value in zip(self.axes, point, strict=True)]
        total = 0.0
        for mask in range(1 << len(corners)):
            weight, index = 1.0, []
            for d, (i, u) in enumerate(corners):
                upper = (mask >> d) & 1
                weight *= u if upper else 1.0 - u
                index.append(min(i + upper, len(self.axes[d]) - 1))
            if weight != 0.0:
                total += weight * self.log_ms[tuple(index)]
        return total

    @property
    def rows(self) -> list:
        """log_ms as nested Python lists (scalar lookups are faster on lists than arrays)."""
        cached = self._rows
        if cached is None:
            cached = self.log_ms.tolist()
            object.__setattr__(self, "_rows", cached)
        return cached

    def _interpolate2(self, x: float, y: float) -> float:
        i, u = _segment(self.axes[0], math.log(max(x, 1e-9)))
        j, v = _segment(self.axes[1], math.log(max(y, 1e-9)))
        g = self.rows
        i1, j1 = min(i + 1, len(g) - 1), min(j + 1, len(g[0]) - 1)
        low = g[i][j] + v * (g[i][j1] - g[i][j])
        high = g[i1][j] + v * (g[i1][j1] - g[i1][j])
        return low + u * (high - low)

    def _interpolate3(self, x: float, y: float, z: float) -> float:
        """The general corner sum below for three axes (GEMM's m, n, k), on nested lists: the
        same weights ((a * b) * c, a = 1 - u or u), corners and additions, in the same order.
        The segments of y and z are kept per (y, z): a GEMM's n and k are a layer's shapes."""
        g, ax = self.rows, self.axes[0]
        i, u = _segment(ax, math.log(max(x, 1e-9)))
        b, c, cols, deps = self._second_third(y, z)
        a, rows = (1.0 - u, u), (i, min(i + 1, len(ax) - 1))
        total = 0.0
        for mask in range(8):
            lo, mid, hi = mask & 1, (mask >> 1) & 1, mask >> 2
            weight = a[lo] * b[mid] * c[hi]
            if weight != 0.0:
                total += weight * g[rows[lo]][cols[mid]][deps[hi]]
        return total

    def _second_third(self, y: float, z: float) -> Corners:
        """_interpolate3's weights and corner indices along the second and third axes, kept
        per (y, z)."""
        hit = self._pairs.get((y, z))
        if hit is not None:
            return hit
        ay, az = self.axes[1], self.axes[2]
        j, v = _segment(ay, math.log(max(y, 1e-9)))
        k, w = _segment(az, math.log(max(z, 1e-9)))
        hit = (1.0 - v, v), (1.0 - w, w), (j, min(j + 1, len(ay) - 1)), (k, min(k + 1, len(az) - 1))
        if len(self._pairs) >= 4096:
            self._pairs.clear()
        self._pairs[(y, z)] = hit
        return hit

    def at_second(self, x: float, y: float) -> float:
        """Latency (ms) at (x, y) along the row kept for x (`second_row`), with libm's log and
        exp (math): every decode path calls this or repeats it operation for operation
        (pdsim/perf/steps/decode.TableStep), so they agree bit for bit on any CPU (numpy's own
        vectorised log and exp differ from libm's in the last bit on some CPUs)."""
        row, drow, axis, width = self.second_row(x)
        log_y = math.log(max(y, 1e-9))
        j = min(max(bisect.bisect_right(axis, log_y) - 1, 0), max(len(axis) - 2, 0))
        v = max((log_y - axis[j]) / width[j], 0.0)
        return math.exp(row[j] + v * drow[j])

    def along_second(self, x: float, ys: np.ndarray) -> np.ndarray:
        """`at_second` for every y of an array."""
        return np.array([self.at_second(x, y) for y in ys.tolist()], dtype=np.float64)

    def second_row(self, x: float) -> Row:
        """at_second's inputs at x: the row interpolated along the first axis, its segment
        differences row[j1] - row[j], the second axis and its segment widths (1.0 where a
        segment has one point), with j1 = min(j + 1, last). Kept per x (a batch size: few
        distinct values)."""
        hit = self._along.get(x)
        if hit is not None:
            return hit
        i, u = _segment(self.axes[0], math.log(max(x, 1e-9)))
        g = self.log_ms
        i1 = min(i + 1, g.shape[0] - 1)
        row = g[i] + u * (g[i1] - g[i])
        axis = np.asarray(self.axes[1])
        up = np.minimum(np.arange(len(axis)) + 1, len(axis) - 1)
        width = np.where(up > np.arange(len(axis)), axis[up] - axis, 1.0)
        hit = row.tolist(), (row[up] - row).tolist(), axis.tolist(), width.tolist()
        if len(self._along) >= 4096:
            self._along.clear()
        self._along[x] = hit
        return hit


def _segment(axis: np.ndarray, value: float) -> tuple[int, float]:
    """Lower index and position in its segment: clamped below, extrapolating above."""
    if len(axis) == 1:
        return 0, 0.0
    i = min(max(bisect.bisect_right(axis, value) - 1, 0), len(axis) - 2)
    lo, hi = axis[i], axis[i + 1]
    return i, max((value - lo) / (hi - lo), 0.0)


def _cell_medians(cells: np.ndarray, latency_ms: np.ndarray, shape: list[int]) -> np.ndarray:
    """The median latency of each cell (flat index per row) on a grid of `shape`; NaN where
    no row (or only NaN latencies) fell. Each cell of the shipped tables holds one row."""
    grid = np.full(math.prod(shape), np.nan)
    counts = np.bincount(cells, minlength=grid.size)
    single = counts[cells] == 1
    grid[cells[single]] = latency_ms[single]
    for cell in np.flatnonzero(counts > 1).tolist():  # repeated measurements
        values = latency_ms[cells == cell]
        values = values[~np.isnan(values)]
        if len(values):
            grid[cell] = np.median(values)
    return grid.reshape(shape)


def _fill_missing(grids: Mapping[K, np.ndarray]) -> dict[K, np.ndarray]:
    """Fill NaN cells slice by slice over the last two axes (separable log fit); the slices of
    one shape, of every grid, in one stacked fit (the same bits as one by one, faster)."""
    out = dict(grids)
    slices: dict[tuple[int, int], list[tuple[K, int]]] = {}
    flat: dict[K, np.ndarray] = {}
    for key, grid in grids.items():
        if np.isnan(grid).any():
            flat[key] = grid.reshape(-1, grid.shape[-2], grid.shape[-1]).copy()
            slices.setdefault(grid.shape[-2:], []).extend((key, i) for i in range(len(flat[key])))
    for members in slices.values():
        done = complete_log_additive_stack(np.stack([flat[key][i] for key, i in members]))
        for (key, i), filled in zip(members, done, strict=True):
            flat[key][i] = filled
    for key, f in flat.items():
        out[key] = f.reshape(grids[key].shape)
    return out


@dataclass(frozen=True, eq=False)
class HeadTables:
    """One attention table per (num_heads, num_kv_heads) of one rank, head_dim 128."""

    grids: dict[tuple[int, int], LogGrid]
    fixed: dict[tuple[float, float], LogGrid] = field(default_factory=dict)  # fixed_heads memo

    @classmethod
    def from_frame(cls, df: pd.DataFrame, token_axis: str, what: str) -> HeadTables:
        parts = {(int(h), int(kv)): part for (h, kv), part in df.groupby(["num_heads", "num_key_value_heads"])}
        return cls(LogGrid.from_frames(parts, ("batch_size", token_axis), what))

    def fixed_heads(self, heads: float, kv_heads: float) -> LogGrid:
        """A (batch, tokens) grid for one head configuration: lookups then cost one 2-D
        interpolation (evaluated on the ticks of the nearest table)."""
        key = (heads, kv_heads)
        if key not in self.fixed:
            batches = sorted({b for g in self.grids.values() for b in g.axes[0]})
            tokens = sorted({t for g in self.grids.values() for t in g.axes[1]})
            values = np.array([[self(heads, kv_heads, math.exp(b), math.exp(t)) for t in tokens]
                               for b in batches])
            self.fixed[key] = LogGrid((batches, tokens), np.log(np.maximum(values, 1e-9)))
        return self.fixed[key]

    def __call__(self, heads: float, kv_heads: float, batch: float, tokens: float) -> float:
        """ms; MHA looks among MHA tables, GQA among tables of the nearest KV head count;
        head counts between tables interpolate linearly (time grows with heads)."""
        mha = abs(heads - kv_heads) < 1e-9
        if mha:
            keys = sorted(k for k in self.grids if k[0] == k[1])
        else:
            kvs = sorted({kv for h, kv in self.grids if h != kv})
            kv = min(kvs, key=lambda x: (abs(np.log(x) - np.log(max(kv_heads, 1e-9))), x))
            keys = sorted(k for k in self.grids if k[1] == kv and k[0] != k[1])
        hs = np.array([k[0] for k in keys], dtype=float)
        j = int(np.clip(np.searchsorted(hs, heads, side="right") - 1, 0, max(len(hs) - 2, 0)))
        low = self.grids[keys[j]](batch, tokens)
        if len(keys) == 1:
            return low * heads / hs[0]
        high = self.grids[keys[j + 1]](batch, tokens)
        if heads <= hs[0]:
            return low * heads / hs[0]
        u = (heads - hs[j]) / (hs[j + 1] - hs[j])
        return max(low + u * (high - low), 0.0)


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


def _version_key(version: str) -> list:
    return [int(x) if x.isdigit() else x for x in version.replace("rc", ".").replace("post", ".").split(".")]


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
    return max(found, key=lambda s: _version_key(s[len(prefix):]))


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
