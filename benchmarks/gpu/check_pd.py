"""Check 3: PD 1P1D on one device (two schedulers share it) over Mooncake, and a short fidelity loop.

    python benchmarks/gpu/check_pd.py --device cuda --shape gpu --attention torch --out DIR --work WORKDIR

Runs `pdsim fidelity`'s loop (analysis.fidelity.loop.run_fidelity) at the shape: `pdreal profile
--quick` of the engine with the shape's grid flags (the batch range the replay reaches), a local
1P1D `pdreal serve` (prefill and decode scheduler processes on
the same device, KV pages moved by the Mooncake transfer engine over TCP, as on one node without
an HCA), idle probes, an open-loop replay of the shape's Poisson workload, then pdsim on exactly
the replayed requests told only the profile and the engine facts (the profile-only table).

Correctness: every replayed request finished (a KV transfer that fails or hangs fails its
request). The fidelity errors inform; they are not a verdict here. Copies fidelity.md,
engine.json and served_steps.csv into --out; the rest of the loop's outputs stay in --work.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import SHAPES, Shape, emit  # noqa: E402


def serve_overrides(shape: Shape, device: str, attention: str) -> tuple[str, ...]:
    return (f"node.model={shape.serve_model}", f"node.dtype={shape.dtype}", f"node.device={device}",
            f"node.attention={attention}", "node.transfer_backend=mooncake", *shape.pd_serve)


def run(shape: Shape, device: str, attention: str, work: Path) -> object:
    from analysis.fidelity.cli import build_parser, workload_overrides
    from analysis.fidelity.loop import FidelityOptions, run_fidelity
    from analysis.fidelity.real import ServeShape

    # `pdsim fidelity`'s own parser (its defaults for every option this check does not set)
    workload = build_parser().parse_args([
        "--requests", str(shape.pd_requests), "--rate", str(shape.pd_rate_rps),
        "--input", f"{shape.pd_input[0]}:{shape.pd_input[1]}", "--output", f"{shape.pd_output[0]}:{shape.pd_output[1]}",
        "--seed", "0", "--slo-ttft-s", "2.0", "--slo-tpot-s", "0.35"])
    options = FidelityOptions(out_dir=work, shape=ServeShape(1, 1, serve_overrides(shape, device, attention)),
                              workload_overrides=tuple(workload_overrides(workload)),
                              sim_overrides=shape.sim_model_overrides, sim_model=shape.sim_model,
                              quick_profile=True, profile_grid_args=shape.pd_profile_grid, num_probes=4,
                              report=False)
    return run_fidelity(options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpu", help="gpu (H200) or tiny (CPU dry run)")
    p.add_argument("--attention", default="torch", choices=["torch", "flashinfer"], help="pdreal attention backend")
    p.add_argument("--out", type=Path, required=True, help="folder for fidelity.md and engine.json")
    p.add_argument("--work", type=Path, required=True, help="folder for the loop's other outputs (traces, logs)")
    args = p.parse_args(argv)
    from analysis.fidelity.loop import result_markdown

    shape = SHAPES[args.shape]
    result = run(shape, args.device, args.attention, args.work)
    (args.out / "fidelity.md").write_text(result_markdown(result))
    shutil.copy(result.paths["engine_json"], args.out / "engine.json")
    # every served forward (size, context, latency): what exposed the torch backend's decode fault
    shutil.copy(result.paths["served_steps_csv"], args.out / "served_steps.csv")
    statuses = result.real["status"].value_counts().to_dict()
    finished = int(statuses.get("finished", 0))
    ok = finished == len(result.real) == shape.pd_requests
    summary = (f"1P1D on {args.device}, attention {args.attention}, Mooncake TCP; {finished}/{shape.pd_requests} "
               f"requests finished ({statuses}); served/profiled forwards: prefill "
               f"{result.slowdown['prefill']:.2f}x, decode {result.slowdown['decode']:.2f}x\n\n"
               + result_markdown(result))
    emit("ok" if ok else "fail", summary, finished=finished, requests=shape.pd_requests)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
