"""NVIDIA AIPerf and `pdreal replay` on the same closed loop against one `pdreal serve`.

    python benchmarks/aiperf_vs_replay.py                      # starts pdreal serve (1P1D SmolLM2)
    python benchmarks/aiperf_vs_replay.py --url http://127.0.0.1:8000 --rounds 1

Both tools run C clients, each sending its next request when the previous one ended, with N
requests of ISL prompt tokens and OSL output tokens (EOS ignored), streamed: AIPerf 0.13.0
(`/v1/completions`, text prompts from its synthetic generator, from its own venv) and `pdreal
replay --concurrency C scenario=bench_random` on each of --replay-endpoints (`completions`: the
same endpoint as AIPerf, token-id prompts; `generate`: `/generate`, token ids). The runs are
interleaved (AIPerf, replay on each endpoint, AIPerf, ...) so drift of a shared machine hits all.
Around every run the router's /metrics are read: the differences of its TTFT and TPOT histogram
sums and counts are the server-side means of that run (router arrival to first token received
from the decode instance; TPOT after the first token), the same for every client, which tells
"the client measured differently" from "the server ran slower". Each tool's per-request
records (AIPerf's profile_export.jsonl through analysis/aiperf.py, the replay's trace.parquet)
give every statistic, the same way, over all requests and over the steady-state window of
docs/CLOSED_LOOP.md (first C sends and the drain left out; AIPerf has no warm-up unless asked,
so its own statistics are the "all" column). Requests of all rounds are pooled per tool.

Metrics (AIPerf's definitions, aiperf/metrics/types in 0.13.0, applied to both traces):
TTFT = first token - request start; TPOT = (last token - first token) / (output tokens - 1),
which AIPerf calls inter_token_latency (ITL); gap = every gap between consecutive tokens (AIPerf's
inter_chunk_latency, one token per chunk here); request latency = last token - request start
(AIPerf stops at the last content chunk, not the end of the stream); output tokens/s = all output
tokens / (last token - first request start) over all requests, completions in the window / its
length over the window; tokens/s per user = 1 / TPOT per request.

Writes into --out (default outputs/aiperf_vs_replay/<time>): round<i>/aiperf,
round<i>/replay-<endpoint>, table.md. AIPerf's venv (--venv, default outputs/aiperf-venv, git-ignored) is created when
missing; its tokenizer folder is written from pdreal's own SmolLM2 tokenizer (AIPerf offline:
a local folder with tokenizer.json and tokenizer_config.json, HF_HUB_OFFLINE unset).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.aiperf import read_aiperf_export  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402
from pdsim.trace import read_trace  # noqa: E402
from pdsim.workload.closed_loop import steady_window  # noqa: E402

AIPERF_VERSION = "0.13.0"
MODEL = "smollm2"


def ensure_venv(folder: Path) -> Path:
    """The aiperf executable of `folder`'s venv, created with aiperf==AIPERF_VERSION if missing;
    RuntimeError with the end of pip's output when the install fails (e.g. no network)."""
    aiperf = folder / "bin" / "aiperf"
    if not aiperf.exists():
        print(f"creating AIPerf's venv in {folder} (about a minute)", flush=True)
        for command in ([sys.executable, "-m", "venv", "--clear", str(folder)],
                        [str(folder / "bin" / "pip"), "install", "-q", f"aiperf=={AIPERF_VERSION}"]):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                tail = " ".join((done.stderr or done.stdout).split())[-400:]
                raise RuntimeError(f"{' '.join(command[:3])} failed (exit {done.returncode}): {tail}")
    return aiperf


def write_tokenizer(folder: Path) -> Path:
    """A local tokenizer folder AIPerf reads offline, from pdreal's SmolLM2 tokenizer."""
    from pdreal.serving.api import load_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    load_tokenizer(MODEL).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 8192}\n')
    return folder


def parse_pin(text: str) -> tuple[set[int], set[int]] | None:
    """--pin SERVER:CLIENT (CPU lists, e.g. 0:1 or 0-2:3) -> (server CPUs, client CPUs); "" -> None."""
    if not text:
        return None
    try:
        server, client = (_cpus(part) for part in text.split(":"))
    except ValueError:
        raise SystemExit(f"aiperf_vs_replay: error: --pin {text!r}: expected SERVER:CLIENT CPU lists, e.g. 0:1") from None
    if server & client:
        raise SystemExit(f"aiperf_vs_replay: error: --pin {text!r}: the server and the client share CPUs {sorted(server & client)}")
    return server, client


def _cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for item in text.split(","):
        low, _, high = item.partition("-")
        cpus |= set(range(int(low), int(high or low) + 1))
    if not cpus:
        raise ValueError(text)
    return cpus


def _pinned(cpus: set[int] | None, then=None):
    """A child setup that binds the process (and so its children) to `cpus`, then runs `then`."""
    def apply() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if then is not None:
            then()
    return apply


def start_server(out: Path, timeout_s: float = 300.0, cpus: set[int] | None = None) -> tuple[subprocess.Popen, str]:
    """`pdreal serve` (default 1P1D) on a free port, bound to `cpus` when given; (process, router
    URL) once it is ready."""
    log_path = out / "serve.log"
    log = log_path.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "pdreal.cli", "serve", "node.port=0"], stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True, preexec_fn=_pinned(cpus))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if "ready at " in line:
                return proc, line.split("ready at ", 1)[1].split()[0]
        if proc.poll() is not None:
            raise SystemExit(f"pdreal serve exited with code {proc.returncode}; its log: {log_path}")
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"pdreal serve not ready after {timeout_s:g} s; its log: {log_path}")


def run_aiperf(aiperf: Path, url: str, tokenizer: Path, args: argparse.Namespace, out: Path, seed: int) -> Path:
    """One AIPerf run; `seed` (--random-seed) picks its synthetic prompts, new per run as the replay's."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # set, AIPerf takes the folder for a hub id
    nice = getattr(args, "aiperf_nice", 0)
    command = [str(aiperf), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "completions",
               "--streaming", "--concurrency", str(args.concurrency), "--request-count", str(args.requests),
               "--tokenizer", str(tokenizer), "--synthetic-input-tokens-mean", str(args.isl),
               "--isl-stddev", "0", "--output-tokens-mean", str(args.osl),
               "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true", "--ui-type", "none",
               "--random-seed", str(seed), "--artifact-dir", str(out), *args.aiperf_args]
    with (out.parent / "aiperf.log").open("w") as log:
        subprocess.run(command, check=True, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=bool(nice),
                       preexec_fn=_pinned(args.client_cpus, _niced(nice) if nice else None))
    return out / "profile_export.jsonl"


def _niced(nice: int):
    """AIPerf's child setup for --aiperf-nice: its own session, niced, and that session's autogroup
    niced. Where the kernel groups CPU time by session (/proc/sys/kernel/sched_autogroup_enabled=1,
    the default on most distributions) `nice -n` alone only ranks AIPerf against the processes of its
    own session: against `pdreal serve` (its own session) AIPerf's group kept an equal share, ~1 of 2
    cores (docs/PDREAL.md, AIPerf vs replay, 2026-11-29). Runs after setsid, before exec."""
    def apply() -> None:
        os.nice(nice)
        try:
            Path("/proc/self/autogroup").write_text(f"{nice}\n")
        except OSError:  # no autogroups (kernel option off or absent): plain nice is all there is
            pass
    return apply


def run_replay(url: str, args: argparse.Namespace, out: Path, endpoint: str, seed: int) -> Path:
    """One replay run; `seed` picks its prompt tokens (a new seed per run: a prompt sent before would
    hit the server's prefix cache and time a shorter prefill)."""
    command = [sys.executable, "-m", "pdreal.cli", "replay", "--url", url, "--out", str(out), "--no-progress",
               "--endpoint", endpoint, "--seed", str(seed),
               "--concurrency", str(args.concurrency), "--max-requests", str(args.requests),
               "scenario=bench_random", f"scenario.input.value={args.isl}", f"scenario.output.value={args.osl}"]
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(command, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                       preexec_fn=_pinned(args.client_cpus))
    return out / "trace.parquet"


SERVER_HISTOGRAMS = {"server TTFT (ms)": "pdreal_ttft_seconds", "server TPOT (ms)": "pdreal_tpot_seconds"}


def router_sums(url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of the router's TTFT and TPOT histograms now."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=10) as resp:
        samples = parse_metrics(resp.read().decode())
    return {name: (sample_value(samples, f"{metric}_sum"), sample_value(samples, f"{metric}_count"))
            for name, metric in SERVER_HISTOGRAMS.items()}


def server_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """A run's server-side means (ms) and requests from the router's sums around it."""
    out = {name: 1e3 * (after[name][0] - before[name][0]) / max(1.0, after[name][1] - before[name][1])
           for name in SERVER_HISTOGRAMS}
    out["server requests"] = after["server TTFT (ms)"][1] - before["server TTFT (ms)"][1]
    return out


def statistics(frames: list[pd.DataFrame], concurrency: int, steady: bool) -> dict[str, tuple[float, float]]:
    """(mean, p50) of each metric over the rounds' finished requests pooled (module docstring);
    throughput is the mean over rounds."""
    rows, rates = [], []
    for df in frames:
        df = df[df["status"] == "finished"].reset_index(drop=True)
        if steady:
            window = steady_window(df["arrival_s"].to_numpy(), df["finish_s"].to_numpy(), concurrency, concurrency)
            done = (df["finish_s"] > window.start_s) & (df["finish_s"] <= window.end_s)
            rates.append(df.loc[done, "output_tokens"].sum() / window.length_s)
            df = df[window.counted]
        else:
            rates.append(df["output_tokens"].sum() / (df["last_token_s"].max() - df["arrival_s"].min()))
        rows.append(df)
    df = pd.concat(rows, ignore_index=True)
    tpot = (df["last_token_s"] - df["first_token_s"]) / (df["output_tokens"] - 1)
    gaps = np.concatenate([np.diff(np.asarray(t, dtype=float)) for t in df["token_times_s"]])
    series = {"TTFT (ms)": (df["first_token_s"] - df["arrival_s"]) * 1e3, "TPOT = AIPerf ITL (ms)": tpot * 1e3,
              "token gap = AIPerf ICL (ms)": pd.Series(gaps * 1e3), "request latency (ms)":
              (df["last_token_s"] - df["arrival_s"]) * 1e3, "tokens/s per user": 1 / tpot}
    out = {name: (float(s.mean()), float(s.median())) for name, s in series.items()}
    out["output tokens/s"] = (float(np.mean(rates)), float("nan"))
    out["requests counted"] = (float(len(df)), float("nan"))
    return out


def table(runs: dict[str, list[pd.DataFrame]], servers: dict[str, list[dict[str, float]]], concurrency: int,
          steady: bool) -> str:
    """One markdown table: each tool's statistics (pooled rounds), diffs relative to AIPerf (the
    first tool), then the server-side means (mean over rounds) under each client."""
    tools = list(runs)
    cols = {tool: statistics(frames, concurrency, steady) for tool, frames in runs.items()}
    head = " | ".join(f"{t} | diff" if i else t for i, t in enumerate(tools))
    lines = [f"| metric | stat | {head} |", "|---|---|" + "---:|" * (2 * len(tools) - 1)]
    for name in cols[tools[0]]:
        for k, stat in enumerate(("mean", "p50")):
            values = [cols[t][name][k] for t in tools]
            if not any(np.isnan(values)):
                lines.append(f"| {name} | {stat} | " + " | ".join(_cell(v, values[0], i) for i, v in enumerate(values))
                             + " |")
    if not steady:
        for name in servers[tools[0]][0]:
            values = [float(np.mean([run[name] for run in servers[t]])) for t in tools]
            lines.append(f"| {name} | mean | " + " | ".join(_cell(v, values[0], i) for i, v in enumerate(values))
                         + " |")
    return "\n".join(lines)


def _cell(value: float, reference: float, index: int) -> str:
    return f"{value:,.1f}" if index == 0 else f"{value:,.1f} | {_diff(value, reference)}"


def _diff(value: float, reference: float) -> str:
    return f"{(value - reference) / reference:+.1%}" if reference else "-"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See the module docstring "
                                "for what each metric means and how the windows are cut.")
    p.add_argument("--url", help="router of a running pdreal serve (default: start one, 1P1D SmolLM2)")
    p.add_argument("--concurrency", type=int, default=4, help="closed-loop clients (default 4)")
    p.add_argument("--requests", type=int, default=24, help="requests per run (default 24)")
    p.add_argument("--isl", type=int, default=64, help="prompt tokens per request (default 64)")
    p.add_argument("--osl", type=int, default=16, help="output tokens per request, EOS ignored (default 16)")
    p.add_argument("--rounds", type=int, default=2, help="AIPerf + replays rounds, interleaved (default 2)")
    p.add_argument("--replay-endpoints", default="completions,generate",
                   help="the replay's endpoints, each run once per round (default completions,generate)")
    p.add_argument("--out", type=Path, help="output folder (default outputs/aiperf_vs_replay/<time>)")
    p.add_argument("--aiperf-arg", dest="aiperf_args", action="append", default=[], metavar="ARG",
                   help="one more aiperf profile argument (repeatable), e.g. --aiperf-arg=--workers-max=1: "
                        "AIPerf's own processes share the CPU with a CPU server")
    p.add_argument("--aiperf-nice", type=int, default=0,
                   help="run AIPerf niced by N in its own session, that session's autogroup niced too (its "
                        "processes then yield the CPU to a server on the same machine)")
    p.add_argument("--pin", default="",
                   help="SERVER:CLIENT CPU lists (e.g. 0:1): bind the started server to the first and each client "
                        "(AIPerf, the replay) to the second, so a client's own CPU cannot slow the server; "
                        "default: no binding")
    p.add_argument("--venv", type=Path, default=ROOT / "outputs" / "aiperf-venv",
                   help="AIPerf's venv, created when missing (default outputs/aiperf-venv)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pin = parse_pin(args.pin)
    args.server_cpus, args.client_cpus = pin if pin else (None, None)
    out = args.out or ROOT / "outputs" / "aiperf_vs_replay" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    aiperf_bin, tokenizer = ensure_venv(args.venv), write_tokenizer(out / "tokenizer")
    server, url = (None, args.url) if args.url else start_server(out, cpus=args.server_cpus)
    endpoints = [e for e in args.replay_endpoints.split(",") if e]
    runs: dict[str, list[pd.DataFrame]] = {"AIPerf": [], **{f"replay {e}": [] for e in endpoints}}
    servers: dict[str, list[dict[str, float]]] = {tool: [] for tool in runs}
    try:
        for i in range(args.rounds):
            folder = out / f"round{i}"
            folder.mkdir(exist_ok=True)
            for j, tool in enumerate(runs):
                print(f"round {i}: {tool}", flush=True)
                before = router_sums(url)
                seed = 1000 * (i + 1) + j  # every run its own prompts: none of them cached by an earlier run
                if tool == "AIPerf":
                    runs[tool].append(read_aiperf_export(run_aiperf(aiperf_bin, url, tokenizer, args,
                                                                    folder / "aiperf", seed)))
                else:
                    endpoint = tool.split()[1]
                    runs[tool].append(read_trace(run_replay(url, args, folder / f"replay-{endpoint}", endpoint, seed)))
                servers[tool].append(server_means(before, router_sums(url)))
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    text = (f"All requests:\n\n{table(runs, servers, args.concurrency, False)}\n\n"
            f"Steady-state windows:\n\n{table(runs, servers, args.concurrency, True)}")
    (out / "table.md").write_text(text + "\n")
    print(text)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
