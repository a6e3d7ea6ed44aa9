"""pdsim with compat=distserve against DistServe's own simulator (simdistserve), side by side.

simdistserve is not part of pdsim: fetch LLMServe/DistServe (Apache-2.0) anywhere outside this
repository; it needs only simpy, numpy and pandas, so this repository's venv runs it. Both
simulators get the same requests: N ShareGPT length pairs sampled (seeded) from Sarathi-Serve's
filtered file, Poisson arrivals at each rate, written as simdistserve's custom-workload JSON and
pdsim's plain CSV. Placements: simdistserve's `vllm` backend (one colocated TP1 instance) and its
`distserve` backend (one prefill TP2 + one decode TP1), OPT-13B on its A100 profiles.

    .venv/bin/python benchmarks/distserve_compare.py --distserve /work/peers/DistServe \\
        --rates 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8 --requests 2000 [--markdown] [--golden out.csv]

Prints per placement and rate: attainment (TTFT, TPOT, both) at the SLO and TTFT / TPOT
percentiles (ms) for both simulators and the relative difference. Latencies use simdistserve's
definitions (TTFT at prefill end; TPOT = (finish - prefill end) / output tokens).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from distserve_peer import PEER_RUNNER, PLACEMENTS

REPO = Path(__file__).resolve().parents[1]
LENGTHS = "traces/sarathi_sharegpt_8k_filtered_lengths_llama2tok.csv"


def make_workload(n: int, rate_rps: float, seed: int, data_dir: Path) -> pd.DataFrame:
    """n length pairs (sampled without replacement, one seed for every rate), Poisson arrivals."""
    src = pd.read_csv(data_dir / LENGTHS)
    idx = np.random.default_rng(seed).choice(len(src), size=n, replace=False)
    gaps = np.random.default_rng([seed, round(rate_rps * 1000)]).exponential(1 / rate_rps, n - 1)
    return pd.DataFrame({
        "arrival_s": np.concatenate([[0.0], np.cumsum(gaps)]),
        "input_tokens": src["num_prefill_tokens"].to_numpy()[idx],
        "output_tokens": src["num_decode_tokens"].to_numpy()[idx],
    })


def run_peer(distserve: Path, wl: pd.DataFrame, placement: str, tmp: Path) -> pd.DataFrame:
    """simdistserve's per-request latencies (ms) for `wl`, in request order."""
    backend, tpp, tpd, _ = PLACEMENTS[placement]
    wl_json, out = tmp / "wl.json", tmp / "latency.csv"
    wl_json.write_text(json.dumps([{"start_time": float(a), "prompt_len": int(i), "output_len": int(o)}
                                   for a, i, o in wl.itertuples(index=False)]))
    subprocess.run([sys.executable, "-c", PEER_RUNNER, str(distserve), str(wl_json), backend, tpp, tpd, str(out)],
                   check=True, capture_output=True)
    got = pd.read_csv(out)
    return pd.DataFrame({"ttft_ms": got["first_token_latency"], "tpot_ms": got["tpot"]})


def run_pdsim(wl: pd.DataFrame, placement: str, tmp: Path, slo: tuple[float, float]) -> pd.DataFrame:
    """pdsim's per-request latencies (ms) with compat=distserve on the same requests."""
    from hydra import compose, initialize_config_dir

    from pdsim import metrics
    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.sim import simulate
    from pdsim.workload import build_workload

    path = tmp / "wl.csv"
    wl.to_csv(path, index=False)
    overrides = ["compat=distserve", "model=opt_13b", "hardware=a100_80g", "scenario=sharegpt",
                 "scenario.source=csv", f"scenario.path={path}", "scenario.num_requests=0", "progress=false",
                 f"slo.ttft_s={slo[0]}", f"slo.tpot_s={slo[1]}", *PLACEMENTS[placement][3]]
    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=overrides))
    trace = simulate(cfg, build_workload(cfg.scenario, cfg.seed, cfg.data_dir), progress=False).trace
    trace = trace.sort_values("request_id")
    return pd.DataFrame({"ttft_ms": 1e3 * metrics.ttft_s(trace, "prefill_end").to_numpy(),
                         "tpot_ms": 1e3 * metrics.tpot_s(trace, "distserve").to_numpy()})


def compare(ours: pd.DataFrame, theirs: pd.DataFrame, slo_ms: tuple[float, float]) -> dict[str, float]:
    """Attainment (percentage points) and percentiles of both, with relative differences."""
    row: dict[str, float] = {}
    for who, df in (("pdsim", ours), ("sds", theirs)):
        ttft_ok, tpot_ok = df["ttft_ms"] <= slo_ms[0], df["tpot_ms"] <= slo_ms[1]
        row[f"{who}_att_ttft"] = 100 * ttft_ok.mean()
        row[f"{who}_att_tpot"] = 100 * tpot_ok.mean()
        row[f"{who}_att_both"] = 100 * (ttft_ok & tpot_ok).mean()
        # simdistserve's search criterion: P90 TTFT and P90 TPOT each strictly below the SLO
        row[f"{who}_p90_pass"] = "pass" if (np.percentile(df["ttft_ms"], 90) < slo_ms[0]
                                            and np.percentile(df["tpot_ms"], 90) < slo_ms[1]) else "fail"
        for col in ("ttft_ms", "tpot_ms"):
            for p in (50, 90, 99):
                row[f"{who}_{col}_p{p}"] = float(np.percentile(df[col], p))
    for key in ("att_ttft", "att_tpot", "att_both"):
        row[f"d_{key}"] = row[f"pdsim_{key}"] - row[f"sds_{key}"]
    for col in ("ttft_ms", "tpot_ms"):
        for p in (50, 90, 99):
            row[f"rel_{col}_p{p}"] = row[f"pdsim_{col}_p{p}"] / row[f"sds_{col}_p{p}"] - 1
    return row


def print_table(rows: list[dict[str, float | str]], markdown: bool) -> None:
    cols = ["placement", "rate", "sds_p90_pass", "pdsim_p90_pass", "sds_att_both", "pdsim_att_both",
            "d_att_ttft", "d_att_tpot", "d_att_both",
            "sds_ttft_ms_p50", "rel_ttft_ms_p50", "rel_ttft_ms_p90", "rel_ttft_ms_p99",
            "sds_tpot_ms_p50", "rel_tpot_ms_p50", "rel_tpot_ms_p90", "rel_tpot_ms_p99"]
    fmt = {c: (lambda v: f"{100 * v:+.2f}%") for c in cols if c.startswith("rel_")}
    fmt.update({c: (lambda v: f"{v:+.2f}") for c in cols if c.startswith("d_")})
    cells = [[fmt.get(c, lambda v: v if isinstance(v, str) else f"{v:.4g}")(r[c]) for c in cols] for r in rows]
    if markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for line in cells:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
    for line in cells:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distserve", type=Path, required=True, help="a LLMServe/DistServe checkout")
    ap.add_argument("--rates", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--placements", default="colocated,disaggregated")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--slo-ms", default="200,100", help="TTFT,TPOT SLO in ms (simdistserve's defaults)")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--golden", type=Path, help="also write simdistserve's per-request latencies here (CSV)")
    args = ap.parse_args(argv)
    slo_ms = tuple(float(x) for x in args.slo_ms.split(","))
    rows, golden = [], []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for placement in args.placements.split(","):
            for rate in (float(r) for r in args.rates.split(",")):
                wl = make_workload(args.requests, rate, args.seed, args.data_dir)
                theirs = run_peer(args.distserve, wl, placement, tmp)
                ours = run_pdsim(wl, placement, tmp, (slo_ms[0] / 1e3, slo_ms[1] / 1e3))
                rows.append({"placement": placement, "rate": f"{rate:g}", **compare(ours, theirs, slo_ms)})
                golden.append(wl.assign(placement=placement, rate_rps=rate, **theirs))
    print_table(rows, args.markdown)
    if args.golden:
        pd.concat(golden).to_csv(args.golden, index=False)  # round-trip floats: same arrivals
    return 0


if __name__ == "__main__":
    sys.exit(main())
