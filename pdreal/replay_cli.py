"""`pdreal replay`: the workload from pdsim's config tree (or a trace file) -> replay -> files.

The workload is any pdsim scenario (synthetic generators and every trace loader), composed with
pdsim's hydra overrides (`scenario=mooncake_conversation scenario.num_requests=100 slo=strict`),
or the requests of an earlier trace parquet (`--trace`, e.g. a pdsim run's trace.parquet:
arrival_s, input_tokens, output_tokens). Writes `trace.parquet` and `trace.summary.json`
(pdsim.metrics.summarize plus the replay's facts) into --out and prints pdsim's summary table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

DEFAULT_SCENARIO = "scenario=chat"
TIMESTAMPS = ("client-side: arrival_s (sent), first_token_s, last_token_s, token_times_s (received), finish_s; "
              "server-side (router clock mapped to the client's): route_s and every queue time")
TIMESTAMPS_COMPLETIONS = ("client-side only (/v1/completions carries no trace row): arrival_s (sent), "
                          "first_token_s, last_token_s, token_times_s (content chunks received), finish_s")


def add_replay_parser(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser("replay", help="open- or closed-loop replay of a workload against a router; writes a pdsim trace",
                       description="Sends each request of a pdsim workload (or trace) at its arrival time "
                                   "(divided by --speedup), or with --concurrency C as C closed-loop clients "
                                   "(each sends the next request in the workload's order when its previous one "
                                   "ended, as benchmark clients do), to ROUTER/generate (or /v1/completions, "
                                   "--endpoint) and writes trace.parquet + "
                                   "trace.summary.json in pdsim's schema; a closed loop's statistics are over "
                                   "its steady-state window, as pdsim's (docs/CLOSED_LOOP.md).")
    p.add_argument("--url", required=True, help="router URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--trace", type=Path, help="replay the requests of this trace parquet instead of a scenario")
    p.add_argument("--out", type=Path, help="output folder (default outputs/replay/<time>)")
    p.add_argument("--speedup", type=float, default=1.0, help="divide arrival times by this")
    p.add_argument("--max-requests", type=int, default=0, help="send at most this many (0 = all)")
    p.add_argument("--max-duration-s", type=float, default=0.0,
                   help="send only requests arriving before this (closed loop: send nothing after this)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="closed loop of this many clients (default: the scenario's scenario.concurrency; 0 = open loop)")
    p.add_argument("--think-s", type=float, default=None,
                   help="closed loop: a client's pause between a response and its next request "
                        "(default: scenario.client_think_s)")
    p.add_argument("--drain-timeout-s", type=float, default=300.0, help="wait this long for the last responses")
    p.add_argument("--max-input-tokens", type=int, default=0, help="clip prompt lengths (0 = no clip)")
    p.add_argument("--max-output-tokens", type=int, default=0, help="clip output lengths (0 = no clip)")
    p.add_argument("--seed", type=int, default=0, help="prompt token seed")
    p.add_argument("--endpoint", choices=("generate", "completions"), default="generate",
                   help="generate (default): /generate with token ids, the router's trace row per request; "
                        "completions: /v1/completions streamed as an OpenAI client (AIPerf) sends it, the same "
                        "token ids as the prompt, times per content chunk, client-side times only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help=f"pdsim config overrides (default {DEFAULT_SCENARIO})")
    p.set_defaults(func=func)


def compose_pdsim(overrides: list[str]) -> Any:
    """pdsim's Config for these overrides (one-line ValueError on a bad one)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pdsim.config import register_configs, to_config
    from pdsim.errors import one_line
    from pdsim.paths import SCENARIOS_DIR

    if not any(o.startswith("scenario=") for o in overrides):
        overrides = [DEFAULT_SCENARIO, *overrides]
    register_configs()
    try:
        with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
            return to_config(compose("config", overrides=overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ValueError(one_line(exc)) from None


def load_workload(args: argparse.Namespace, cfg: Any) -> Any:
    from pdsim.trace import read_trace
    from pdsim.workload import build_workload, make_workload

    if args.trace is None:
        return build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    df = read_trace(args.trace).sort_values("arrival_s", kind="stable")
    return make_workload(args.trace.stem, df["arrival_s"].to_numpy(), df["input_tokens"].to_numpy(),
                         df["output_tokens"].to_numpy(), df["session_id"].to_numpy())


def replay_loop(cfg: Any, args: argparse.Namespace) -> Any:
    """The closed loop to replay (None: open loop): the scenario's, with --concurrency / --think-s
    and --max-duration-s over it; fields checked as pdsim checks them (one-line errors)."""
    from dataclasses import replace

    from pdsim.workload.closed_loop import closed_loop_of

    scenario = cfg.scenario
    if args.concurrency is not None:
        scenario = replace(scenario, concurrency=args.concurrency)
    if args.think_s is not None:
        scenario = replace(scenario, client_think_s=args.think_s)
    if args.max_duration_s:
        scenario = replace(scenario, duration_s=args.max_duration_s)
    return closed_loop_of(scenario)


def router_state(url: str) -> dict[str, Any]:
    """The router's /stats, freshly polled (synchronously, before and after the replay)."""
    async def get() -> dict[str, Any]:
        import aiohttp

        async with aiohttp.ClientSession() as session, session.get(f"{url.rstrip('/')}/stats?fresh=1") as resp:
            return await resp.json()

    return asyncio.run(get())


def instances_after(stats: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("queues", "kv_used_tokens", "kv_total_tokens", "transfer_rooms", "num_finished", "num_failed")
    return [{"role": i["role"], "index": i["index"], "healthy": i["healthy"],
             **{k: i["stats"].get(k) for k in keys}} for i in stats["instances"]]


def run_replay_command(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from pdreal.replay import ReplayOptions, plan_requests, replay
    from pdsim.metrics import Slo, summarize
    from pdsim.summary import format_summary
    from pdsim.trace import TraceRecorder, write_trace

    cfg = compose_pdsim(list(args.overrides))
    loop = replay_loop(cfg, args)
    options = ReplayOptions(args.speedup, args.max_requests, args.max_duration_s, args.drain_timeout_s,
                            args.max_input_tokens, args.max_output_tokens, args.seed, loop=loop,
                            endpoint=getattr(args, "endpoint", "generate"))
    requests = plan_requests(load_workload(args, cfg), options)
    if not requests:
        raise ValueError("the workload has no requests inside --max-requests / --max-duration-s")
    before = router_state(args.url)
    vocab = int(next(i["stats"]["engine"]["vocab_size"] for i in before["instances"] if i["stats"]))
    bar = tqdm(total=len(requests), unit="req", disable=args.no_progress, file=sys.stderr, desc="replay (ended)")
    counts: Counter[str] = Counter()

    def note(key: str) -> None:
        counts[key] += 1
        bar.set_postfix(sent=counts["sent"], finished=counts["finished"], failed=counts["failed"],
                        rejected=counts["rejected"], refresh=False)
        bar.update(0 if key == "sent" else 1)

    rows, facts = asyncio.run(replay(args.url, requests, vocab, options, on_done=note, on_sent=lambda: note("sent")))
    bar.close()
    recorder = TraceRecorder()
    for row in rows:
        recorder.add(row)
    df = recorder.to_frame()
    summary = summarize(df, Slo(cfg.slo.ttft_s, cfg.slo.tpot_s, cfg.slo.attainment_target), cfg.slo.tpot_definition,
                        loop)
    summary.update(replay={**facts, "speedup": args.speedup, "workload": cfg.scenario.name if args.trace is None
                           else str(args.trace), "routing": before.get("routing"),
                           "timestamps": TIMESTAMPS if options.endpoint == "generate" else TIMESTAMPS_COMPLETIONS,
                           "admission": before.get("admission")},
                   instances_after=instances_after(router_state(args.url)))
    out = args.out or Path("outputs") / "replay" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    path = write_trace(df, out / "trace.parquet", summary)
    how = f"speedup {args.speedup:g}" if loop is None else f"closed loop, concurrency {loop.concurrency}"
    print(format_summary(summary, f"pdreal replay: {summary['replay']['workload']} -> {args.url}  "
                                  f"({len(rows)} requests, {how})"))
    print(f"\nTTFT/TPOT measured at the client. outputs: {path} and {path.with_name('trace.summary.json')}")
    print(ending(rows, facts, args.drain_timeout_s), file=sys.stderr)
    return 0


def ending(rows: list[dict[str, Any]], facts: dict[str, Any], drain_timeout_s: float) -> str:
    """The replay's last words: what ended how, and what to change when requests were left running."""
    statuses = Counter(row["status"] for row in rows)
    text = (f"pdreal replay: {statuses['finished']} finished, {statuses['failed']} failed, "
            f"{statuses['rejected']} rejected of {len(rows)} requests in {facts['wall_s']:.1f} s")
    unfinished = facts["requests_unfinished_at_stop"]
    if unfinished:
        text += (f"\npdreal replay: {unfinished} of them were still running {drain_timeout_s:g} s after the last "
                 "send (--drain-timeout-s) and count as failed: the server is slower than this workload here. "
                 "Lower scenario.rate_rps or the lengths (--max-input-tokens, --max-output-tokens), or raise "
                 "--drain-timeout-s.")
    reasons = Counter(row["failure_reason"][:80] for row in rows if row["status"] != "finished")
    if reasons:
        text += "\npdreal replay: reasons: " + "; ".join(f"{n} x {r}" for r, n in reasons.most_common(4))
    return text
