"""`pdsim fidelity`: the sim-to-real loop on this machine, ending with the error table.

    pdsim fidelity [--requests 100 --rate 0.8 --input 16:256 --output 8:64 ...] [pdsim overrides]
    pdsim fidelity --colocated 1 [--schedule prefill_priority] ...   (colocated instead of PD)
    pdsim fidelity --concurrency 4 ...   (closed loop of 4 clients, as benchmarks load a server)

The workload is pdsim's synthetic generator (Poisson arrivals, uniform lengths) unless
overrides say otherwise (`scenario.*`, `slo.*`, `seed` apply to the workload and the SLO);
`--serve key=value` configures the served engine (`pdreal serve` overrides, also profiled);
`--sim key=value` adds pdsim overrides for the simulation only.
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime
from pathlib import Path

from analysis.fidelity.compare import format_report, targets_met

PILOT_REQUESTS = 16


def _range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        pair = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH token counts, got {text!r}") from None
    if not 1 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"expected 1 <= LOW <= HIGH, got {text!r}")
    return pair


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdsim fidelity", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="output folder (default outputs/fidelity/<time>)")
    p.add_argument("--prefill", type=int, default=1, help="prefill instances")
    p.add_argument("--decode", type=int, default=1, help="decode instances")
    p.add_argument("--colocated", type=int, default=0, metavar="N",
                   help="N colocated instances (prefill and decode in one engine) instead of --prefill/--decode")
    p.add_argument("--schedule", choices=["mixed", "prefill_priority"], default="mixed",
                   help="colocated schedule (with --colocated): mixed = chunked-prefill batches with the "
                        "decodes, prefill_priority = prefill batches alone")
    p.add_argument("--requests", type=int, default=100, help="requests in the workload")
    p.add_argument("--rate", type=float, default=0.6, help="Poisson arrival rate (requests/s)")
    p.add_argument("--input", type=_range, default=(16, 128), help="prompt tokens LOW:HIGH (uniform)")
    p.add_argument("--output", type=_range, default=(8, 48), help="output tokens LOW:HIGH (uniform)")
    p.add_argument("--concurrency", type=int, default=0, metavar="C",
                   help="closed loop of C clients instead of Poisson arrivals (benchmark-shaped load; --rate "
                        "is then unused); both sides' statistics over the steady-state window")
    p.add_argument("--think-s", type=float, default=0.0, help="closed loop: a client's pause between requests")
    p.add_argument("--seed", type=int, default=0, help="workload seed")
    p.add_argument("--slo-ttft-s", type=float, default=2.0, help="TTFT SLO (s) for SLO goodput")
    p.add_argument("--slo-tpot-s", type=float, default=0.35, help="TPOT SLO (s) for SLO goodput")
    p.add_argument("--serve", action="append", default=[], metavar="KEY=VALUE",
                   help="pdreal serve override for the profiled and served engine (repeatable)")
    p.add_argument("--sim", action="append", default=[], metavar="KEY=VALUE",
                   help="extra pdsim override for the simulation only (repeatable)")
    p.add_argument("--profile", type=Path, help="reuse this `pdreal profile` folder instead of profiling")
    p.add_argument("--quick-profile", action="store_true", help="the small profile grid")
    p.add_argument("--repeats", type=int, default=0, help="profile repeats per cell (default: the grid's)")
    p.add_argument("--probes", type=int, default=8, help="idle probe requests for the hop latencies")
    p.add_argument("--pilot", type=int, default=PILOT_REQUESTS, metavar="N",
                   help="loaded probe: N requests of the same workload (another seed) sent before the replay; "
                        "their served forwards' slowdown against the profile (the host's contention) goes into "
                        "the prediction. 0 = the profile and idle probes alone")
    p.add_argument("--no-report", action="store_true", help="skip the HTML/markdown comparison report")
    p.add_argument("--from-run", type=Path, metavar="DIR",
                   help="re-simulate and re-compare this finished run folder (its shape, workload, SLO and "
                        "measurements; nothing is profiled, served or replayed); with --profile, against "
                        "that profile.csv instead of the run's")
    p.add_argument("--scale-from", type=Path, metavar="DIR",
                   help="take the served forward slowdown from this other finished run (same profile) "
                        "instead of this run's own served steps: an out-of-sample prediction")
    p.add_argument("overrides", nargs="*", help="pdsim overrides for the workload/SLO, e.g. scenario.arrival=gamma")
    return p


def workload_overrides(args: argparse.Namespace) -> list[str]:
    return ["scenario=chat", "scenario.name=fidelity", "scenario.source=synthetic",
            f"scenario.num_requests={args.requests}", f"scenario.rate_rps={args.rate}", "scenario.arrival=poisson",
            "scenario.input.kind=uniform", f"scenario.input.low={args.input[0]}", f"scenario.input.high={args.input[1]}",
            "scenario.output.kind=uniform", f"scenario.output.low={args.output[0]}",
            f"scenario.output.high={args.output[1]}", "scenario.prefix.num_system_prompts=0",
            "scenario.prefix.system_prompt_tokens=0", "scenario.prefix.session_turns=1", f"seed={args.seed}",
            f"scenario.concurrency={args.concurrency}", f"scenario.client_think_s={args.think_s}",
            f"slo.ttft_s={args.slo_ttft_s}", f"slo.tpot_s={args.slo_tpot_s}", *args.overrides]


def main(argv: list[str] | None = None) -> int:
    from analysis.fidelity.loop import predicted_from, run_fidelity
    from analysis.fidelity.options import FidelityOptions
    from analysis.fidelity.real import ServeShape

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = args.out or Path("outputs") / "fidelity" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    try:
        shape = ServeShape(args.prefill, args.decode, tuple(args.serve), args.colocated, args.schedule)
        options = FidelityOptions(
            out_dir=out, shape=shape,
            workload_overrides=tuple(workload_overrides(args)), sim_overrides=tuple(args.sim),
            profile_dir=args.profile, quick_profile=args.quick_profile, profile_repeats=args.repeats,
            num_probes=args.probes, report=not args.no_report, from_run=args.from_run,
            scale_from=args.scale_from, pilot_requests=args.pilot)
        result = run_fidelity(options)
    except (ValueError, FileNotFoundError, RuntimeError, TimeoutError) as exc:
        print(f"pdsim fidelity: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    real = result.real
    print(f"pdsim fidelity: {len(real)} requests ({(real['status'] == 'finished').sum()} finished), "
          f"{result.shape_name}; outputs in {out}")
    for name, path in result.paths.items():
        print(f"  {name}: {path}")
    print("  steps (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings_s.items()))
    print(f"  predicted simulation (the result, from {predicted_from(result.facts)}): {result.sim_command}")
    print(f"  served forwards / offline profile (trimmed ratio of sums): prefill {result.slowdown['prefill']:.2f}x, "
          f"decode {result.slowdown['decode']:.2f}x (from {result.slowdown_source}; diagnostic)")
    print(f"  calibrated simulation (diagnostic): {result.calibrated_command}")
    print("\n" + format_report(result.table, result.scan, result.calibrated_table, result.slo,
                               predicted_from(result.facts)))
    return 0 if targets_met(result.table) else 1


if __name__ == "__main__":
    sys.exit(main())
