"""The real half of the fidelity loop: profile the engine, serve a cluster, probe it, replay.

Everything here drives pdreal (imported lazily: `import pdsim` never loads torch): `pdreal
profile` runs as a child process (its own torch threads, like the served instances), the
cluster is pdreal's `LocalCluster` (one process per instance plus the router), and the replay
is pdreal's open-loop client in this process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pdsim.policy.limits import check_schedule
from pdsim.workload import Workload
from pdsim.workload.closed_loop import ClosedLoop

log = logging.getLogger(__name__)




@dataclass(frozen=True)
class ServeShape:
    """The served cluster: instance counts and pdreal serve overrides (key=value).

    colocated > 0: that many colocated instances (with `colocated_schedule`) instead of prefill
    and decode; `overrides` then also carry cluster.mode=colocated, cluster.colocated and
    cluster.colocated_schedule, so the profile and the served cluster both see the colocated
    engine.
    """

    prefill: int = 1
    decode: int = 1
    overrides: tuple[str, ...] = ()
    colocated: int = 0
    colocated_schedule: str = "mixed"

    def __post_init__(self) -> None:
        if self.colocated < 0:
            raise ValueError(f"colocated instances must be >= 0, got {self.colocated}")
        check_schedule(self.colocated_schedule, "fidelity")
        if self.colocated:
            mode = ("cluster.mode=colocated", f"cluster.colocated={self.colocated}",
                    f"cluster.colocated_schedule={self.colocated_schedule}")
            object.__setattr__(self, "overrides", (*self.overrides, *(m for m in mode if m not in self.overrides)))

    @property
    def name(self) -> str:
        """1P1D, or 2C(mixed)."""
        if self.colocated:
            return f"{self.colocated}C({self.colocated_schedule})"
        return f"{self.prefill}P{self.decode}D"


def run_profile(out_dir: Path, overrides: tuple[str, ...], quick: bool, repeats: int = 0,
                log_file: Path | None = None, grid_args: tuple[str, ...] = ()) -> Path:
    """`pdreal profile` into out_dir (profile.csv + engine.json); returns engine.json's path.
    `grid_args`: its grid flags (`--prefill-tokens 128,512` ...), before the serve overrides."""
    cmd = [sys.executable, "-m", "pdreal.cli", "profile", "--out", str(out_dir), *(["--quick"] if quick else []),
           *(["--repeats", str(repeats)] if repeats else []), *grid_args, *overrides]
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_file or out_dir / "profile.log"
    with log_path.open("w") as log_out:
        done = subprocess.run(cmd, stdout=log_out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log_path.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"pdreal profile failed (exit {done.returncode}): {' | '.join(tail)}")
    return out_dir / "engine.json"


class RealCluster:
    """A running local pdreal cluster (context manager: stopped on exit)."""

    def __init__(self, shape: ServeShape, workdir: Path) -> None:
        from pdreal.serving.config import load_serve_config
        from pdreal.serving.launch import LocalCluster

        cfg = load_serve_config(None, list(shape.overrides))
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = LocalCluster(cfg, workdir / "configs", shape.prefill, shape.decode, log_dir=workdir)
        self.url = ""

    def __enter__(self) -> RealCluster:
        self.url = self.cluster.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()

    def probe(self, num_probes: int = 8) -> dict[str, Any]:
        """Idle hop latencies (pdreal.probe; colocated hops on a colocated cluster)."""
        from pdreal.probe import probe_cluster

        return probe_cluster(self.url, num_probes)

    def served_steps(self, since_s: float) -> list[dict[str, Any]]:
        """Every instance's timed forwards that ended after `since_s` (monotonic clock; the
        instances run on this machine), tagged with the instance name."""
        import aiohttp

        async def fetch() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            async with aiohttp.ClientSession() as session:
                for name, child in self.cluster.children.items():
                    if name == "router":
                        continue
                    async with session.get(f"{child.url}/steps", params={"since_s": repr(since_s)}) as resp:
                        body = await resp.json()
                    out += [{**r, "instance": name} for r in body["steps"]]
            return out

        return asyncio.run(fetch())

    def replay(self, workload: Workload, drain_timeout_s: float = 600.0, seed: int = 0,
               loop: ClosedLoop | None = None) -> tuple[pd.DataFrame, dict]:
        """Send the workload open-loop (or as the closed `loop`); the trace (pdsim schema, client
        clock) and replay facts."""
        from pdreal.replay import ReplayOptions, plan_requests, replay
        from pdreal.replay_cli import router_state
        from pdsim.trace import TraceRecorder

        options = ReplayOptions(drain_timeout_s=drain_timeout_s, seed=seed, loop=loop)
        requests = plan_requests(workload, options)
        state = router_state(self.url)
        vocab = int(next(i["stats"]["engine"]["vocab_size"] for i in state["instances"] if i["stats"]))
        rows, facts = asyncio.run(replay(self.url, requests, vocab, options))
        recorder = TraceRecorder()
        for row in rows:
            recorder.add(row)
        return recorder.to_frame(), facts


def merge_probe(engine_json: Path, probe: dict[str, Any]) -> None:
    """Record the probe's hop latencies in engine.json (`probe` entry)."""
    data = json.loads(engine_json.read_text())
    data["probe"] = probe
    engine_json.write_text(json.dumps(data, indent=2))


def requests_csv(trace: pd.DataFrame, path: Path, workload: Workload | None = None) -> Path:
    """The replay's actual requests as pdsim's plain CSV (arrival_s = when the client sent it),
    with the workload's prefix block hashes when it has any (the prefix cache's input)."""
    frame = trace.sort_values(["arrival_s", "request_id"], kind="stable")
    frame = frame[["request_id", "arrival_s", "input_tokens", "output_tokens"]].copy()
    if workload is not None and len(workload.hash_values):
        hashes = {r.request_id: " ".join(map(str, r.hash_ids)) for r in workload}
        frame["hash_ids"] = [hashes.get(int(rid), "") for rid in frame.request_id]
        frame["block_tokens"] = workload.block_tokens
    frame.to_csv(path, index=False)
    return path
