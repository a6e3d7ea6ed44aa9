"""`pdreal profile`: the engine's step latencies on this device, in pdsim's profile-table format.

Grid (each cell: the median of `repeats` timed steps, forward plus greedy sampling,
device-synchronised, taken in interleaved rounds after a warm-up round):

- prefill: `num_seqs` fresh prompts of `tokens` tokens each (kind=prefill, context_tokens=0),
  and single chunks after cached context (context_tokens > 0; pdsim's table model skips these,
  `pdsim calibrate` can use them);
- decode: `num_seqs` sequences of `context` KV tokens each, one new token each; with
  `--ragged-decode` the lengths are spread over [context/2, 3*context/2] with that mean
  (`ragged_contexts`), as in a served batch (docs/FIDELITY.md has its measured effect).

Writes `profile.csv` (kind,num_seqs,new_tokens,context_tokens,latency_s; pdsim.perf.profile) and
`engine.json`: the served engine's configuration (KV capacity, page size, max running requests,
chunk size, from the same serve config `pdreal serve` reads; with cluster.mode=colocated the
colocated engine's, with its schedule and new-token ratio), KV bytes per token, the measured
KV-transfer bandwidth and setup time, and the engine loop's per-step overhead beyond the forward
(measured on a short in-process PD run, or a colocated one).

A colocated mixed step needs no rows of its own: pdsim's table model predicts it from the prefill
and decode grids (pdsim/perf/table.py), and `pdsim fidelity` compares that prediction with the
served mixed steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pdreal.step_overhead import colocated_step_overhead_facts, step_overhead_facts
from pdsim.perf.profile import PROFILE_COLUMNS, ProfilePoint, write_profile_csv

PROFILE_FILE, FACTS_FILE = "profile.csv", "engine.json"


@dataclass(frozen=True)
class ProfileGrid:
    prefill_seqs: tuple[int, ...] = (1, 2, 4)
    prefill_tokens: tuple[int, ...] = (16, 64, 128, 256, 512)  # per sequence
    chunk_tokens: tuple[int, ...] = (64, 256)  # one chunk after cached context
    chunk_context: tuple[int, ...] = (256, 1024)
    decode_seqs: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 32)  # dense where CPU GEMMs change kernel
    decode_context: tuple[int, ...] = (64, 256, 1024)  # per sequence
    repeats: int = 3
    ragged_decode: bool = False  # decode batches of mixed context lengths (ragged_contexts)

    def __post_init__(self) -> None:
        for name in ("prefill_seqs", "prefill_tokens", "decode_seqs", "decode_context"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"profile grid {name} must be non-empty positive integers, got {values}")
        if self.repeats < 1:
            raise ValueError(f"profile repeats must be >= 1, got {self.repeats}")

    def pages_needed(self, page_size_tokens: int) -> int:
        def pages(tokens: int) -> int:
            return -(-tokens // page_size_tokens)
        prefill = max(self.prefill_seqs) * pages(max(self.prefill_tokens))
        chunk = pages(max(self.chunk_context, default=0) + max(self.chunk_tokens, default=0))
        decode = max(sum(pages(c + 1) for c in self.decode_contexts(ctx, n)) for n in self.decode_seqs
                     for ctx in self.decode_context)
        return max(prefill, chunk, decode)


    def decode_contexts(self, mean_tokens: int, seqs: int) -> list[int]:
        """The context lengths of one profiled decode batch."""
        return ragged_contexts(mean_tokens, seqs) if self.ragged_decode else [mean_tokens] * seqs


QUICK_GRID = ProfileGrid(prefill_seqs=(1, 2), prefill_tokens=(16, 64, 256), chunk_tokens=(64,), chunk_context=(256,),
                         decode_seqs=(1, 2, 3, 4, 8, 16), decode_context=(64, 512), repeats=2)


@dataclass(frozen=True)
class _Cell:
    kind: str
    seqs: int
    new_per_seq: int
    context: int


def profile_runner(runner: Any, grid: ProfileGrid, on_point: Callable[[ProfilePoint], None] | None = None,
                   on_round: Callable[[int, int], None] | None = None) -> list[ProfilePoint]:
    """Time every grid cell on `runner` (a ModelRunner whose pool holds grid.pages_needed pages).

    Cells are timed in interleaved rounds: a warm-up round, then `repeats` rounds that each time
    every cell once; a cell's latency is the median over the rounds. A burst of outside load then
    costs one sample of many cells instead of every sample of one cell (on this shared 2-core
    machine, consecutive repeats gave prefill cells that were 15-25% off from one profile to the next)."""
    import torch

    device = runner.model.device

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    cells = points_grid(grid)
    samples: dict[_Cell, list[float]] = {cell: [] for cell in cells}
    for round_index in range(grid.repeats + 1):
        for cell in cells:
            latency = _time_cell(runner, grid, cell, sync)
            if round_index:  # round 0 warms up
                samples[cell].append(latency)
        if on_round is not None:
            on_round(round_index, grid.repeats)
    points = []
    for cell in cells:
        point = ProfilePoint(cell.kind, cell.seqs, cell.seqs * cell.new_per_seq, cell.seqs * cell.context,
                             statistics.median(samples[cell]))
        if on_point is not None:
            on_point(point)
        points.append(point)
    return points


def points_grid(grid: ProfileGrid) -> list[_Cell]:
    """The cells of `grid`, in the order they are timed."""
    cells = [_Cell("prefill", s, t, 0) for s in grid.prefill_seqs for t in grid.prefill_tokens]
    cells += [_Cell("prefill", 1, t, c) for t in grid.chunk_tokens for c in grid.chunk_context]
    return cells + [_Cell("decode", s, 1, c) for s in grid.decode_seqs for c in grid.decode_context]


def _time_cell(runner: Any, grid: ProfileGrid, cell: _Cell, sync: Callable[[], None]) -> float:
    """Seconds of one forward (+ greedy sampling) of `cell`'s batch, pages allocated and freed around it."""
    from pdreal.model.batch import SeqChunk
    from pdsim.policy.views import pages_for

    page, vocab = runner.page_size_tokens, runner.model.spec.vocab_size
    contexts = grid.decode_contexts(cell.context, cell.seqs) if cell.kind == "decode" else [cell.context] * cell.seqs
    tables = [runner.pool.allocator.allocate(pages_for(c + cell.new_per_seq, page)) for c in contexts]
    chunks = [SeqChunk([(7 * (i + j) + 11) % vocab for j in range(cell.new_per_seq)], c, t)
              for i, (c, t) in enumerate(zip(contexts, tables, strict=True))]
    try:
        sync()
        start = time.perf_counter()
        runner.forward(chunks).argmax(-1).tolist()
        sync()
        return time.perf_counter() - start
    finally:
        for table in tables:
            runner.pool.allocator.free(table)


def ragged_contexts(mean_tokens: int, seqs: int) -> list[int]:
    """Context lengths of a ragged profiled decode batch: spread evenly over [mean/2, 3*mean/2]
    with the given mean (the total is exactly seqs * mean). Served batches mix lengths, and on CPU
    a batch of equal lengths can decode faster than a mixed one of the same total (4 sequences:
    103 ms equal vs 118-134 ms mixed for SmolLM2)."""
    if seqs == 1:
        return [mean_tokens]
    low = mean_tokens // 2
    out = [low + (mean_tokens * i) // (seqs - 1) for i in range(seqs)]
    out[-1] += seqs * mean_tokens - sum(out)
    return out


def transfer_facts(layout: Any, backend: str, request_pages: int = 64) -> dict[str, Any]:
    """KV bandwidth of one request-sized transfer (coalesced) and the time of a one-page transfer."""
    from pdreal.bench import transfer_gbps

    layout = replace(layout, num_pages=max(request_pages, 1), dtype_bytes=2)
    big = transfer_gbps(layout, request_pages, coalesce=True, backend=backend)
    small = transfer_gbps(layout, 1, coalesce=True, backend=backend)
    return {"backend": backend, "pages": request_pages, "bytes": big.bytes, "seconds": big.seconds,
            "bandwidth_bytes_per_s": big.bytes / big.seconds, "bandwidth_gbit_per_s": 8 * big.bytes / big.seconds / 1e9,
            "one_page_transfer_s": small.seconds}


def write_tp_profile_csv(path: Path, points: list[ProfilePoint], tp: int) -> None:
    """The profile CSV with a `tp` column (pdsim's table model filters on it per instance side);
    the rows of other TP sizes already in `path` are kept, so profiles per TP share one table."""
    kept: list[dict[str, str]] = []
    if path.is_file():
        with path.open(newline="") as f:
            kept = [row for row in csv.DictReader(f) if row.get("tp") and row["tp"] != str(tp)]
    write_profile_csv(path, points)
    with path.open(newline="") as f:
        rows = [{**row, "tp": str(tp)} for row in csv.DictReader(f)]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*PROFILE_COLUMNS, "tp"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept + rows)


GRID_LISTS = ("prefill_seqs", "prefill_tokens", "decode_seqs", "decode_context")


def int_list(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): the grid flags' argparse type (a bad entry names itself)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_profile_parser(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser("profile", help="step latencies -> pdsim profile table + engine facts",
                       description="Times prefill and decode steps over a grid on this device and writes "
                                   f"{PROFILE_FILE} (pdsim perf.kind=table) and {FACTS_FILE} (KV capacity, page "
                                   "size, max running requests, chunk size, KV-transfer bandwidth, step overhead). "
                                   "With cluster.mode=colocated (and cluster.colocated_schedule) the facts are "
                                   "the colocated engine's.")
    p.add_argument("--out", type=Path, default=Path("outputs/profile"), help="output folder")
    p.add_argument("--quick", action="store_true", help="a small grid (about a minute on CPU with SmolLM2)")
    p.add_argument("--repeats", type=int, default=0, help="timed repeats per cell (default: the grid's)")
    p.add_argument("--ragged-decode", action="store_true",
                   help="profile decode batches with mixed context lengths (mean = the grid's context)")
    for name, example in zip(GRID_LISTS, ("1,2,4", "128,512,2048", "1,8,32,64", "256,1024"), strict=True):
        p.add_argument(f"--{name.replace('_', '-')}", type=int_list, default=None, metavar="N,N,...",
                       help=f"the grid's {name.replace('_', ' ')} (e.g. {example}): profile the range the "
                            "workload reaches, since pdsim extrapolates past the last cell")
    p.add_argument("--tp", type=int, default=0,
                   help="tensor-parallel ranks of the profiled engine (default: cluster.decode_tp, colocated_tp)")
    p.add_argument("--config", help="serve YAML: the engine whose facts are reported (as `pdreal serve`)")
    p.add_argument("overrides", nargs="*", help="serve config key=value, e.g. node.model=smollm2 cluster.page_size_tokens=16")
    p.set_defaults(func=func)


def grid_from_args(args: argparse.Namespace) -> ProfileGrid:
    """The grid `pdreal profile` times: --quick's or the default, with --repeats, --ragged-decode
    and any of the four value lists (--prefill-seqs ...) in place of the grid's own."""
    fields = asdict(QUICK_GRID if args.quick else ProfileGrid())
    fields.update({name: getattr(args, name) for name in GRID_LISTS if getattr(args, name, None)})
    if getattr(args, "repeats", 0):
        fields["repeats"] = args.repeats
    if getattr(args, "ragged_decode", False):
        fields["ragged_decode"] = True
    return ProfileGrid(**fields)  # validates the values


def run_profile_command(args: argparse.Namespace) -> int:
    import torch

    from pdreal.engine.tp_runner import make_runner
    from pdreal.model.weights import load_model
    from pdreal.serving.config import load_serve_config
    from pdreal.serving.node import engine_config, model_source

    cfg = load_serve_config(args.config, args.overrides)
    torch.set_num_threads(cfg.node.threads)
    grid = grid_from_args(args)
    colocated = cfg.cluster.mode == "colocated"
    served = engine_config(cfg, "colocated" if colocated else "decode")
    served = replace(served, tp_size=getattr(args, "tp", 0) or served.tp_size)
    # cluster.{decode,colocated}_tp > 1: the forwards are the TP runner's (its rank processes take
    # part); the step overheads below are measured at TP 1 on the whole model
    runner = make_runner(model_source(cfg), replace(served, num_pages=max(served.num_pages,
                                                                          grid.pages_needed(served.page_size_tokens))))
    model = runner.model if served.tp_size == 1 else load_model(model_source(cfg)).model
    start = time.perf_counter()
    points = profile_runner(runner, grid, lambda p: print(f"  {p.kind:<7} seqs {p.num_seqs:>3}  new {p.new_tokens:>5}  "
                                                          f"ctx {p.context_tokens:>6}  {1e3 * p.latency_s:9.2f} ms",
                                                          flush=True),
                            lambda done, total: print(f"  round {done}/{total} of {len(points_grid(grid))} cells "
                                                      f"{'(warm-up) ' if done == 0 else ''}done", flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    write_tp_profile_csv(args.out / PROFILE_FILE, points, served.tp_size)
    # a colocated engine moves no KV: the in-process copy keeps the facts complete without mooncake
    backend = cfg.node.transfer_backend if cfg.node.transfer_backend in ("mooncake", "local") and not colocated \
        else "local"
    runner.close()
    spec, layout = model.spec, replace(runner.pool.layout, num_kv_heads=model.spec.num_kv_heads)
    facts = {"model": spec.name, "model_spec": asdict(spec), "device": cfg.node.device, "dtype": cfg.node.dtype,
             "attention": cfg.node.attention, "threads": cfg.node.threads, "engine": asdict(served),
             "kv_capacity_tokens": served.kv_capacity_tokens, "page_size_tokens": served.page_size_tokens,
             "max_running_requests": served.max_running_requests, "max_prefill_tokens": served.max_prefill_tokens,
             "chunk_size_tokens": served.chunk_size_tokens, "mode": cfg.cluster.mode,
             "colocated_schedule": served.colocated_schedule, "new_token_ratio": served.new_token_ratio,
             "tp_size": served.tp_size,
             "kv_bytes_per_token": 2 * layout.num_layers * layout.page_bytes // layout.page_size_tokens,
             "transfer": transfer_facts(layout, backend),
             **(colocated_step_overhead_facts if colocated else step_overhead_facts)(model, replace(served, tp_size=1)),
             "profile_points": len(points), "profile_wall_s": time.perf_counter() - start, "grid": asdict(grid)}
    (args.out / FACTS_FILE).write_text(json.dumps(facts, indent=2))
    print(f"pdreal profile: {len(points)} points -> {args.out / PROFILE_FILE}; engine facts -> {args.out / FACTS_FILE}")
    return 0
