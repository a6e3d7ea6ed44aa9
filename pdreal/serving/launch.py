"""A whole cluster on this machine: prefill and decode (or colocated) instances and a router as
subprocesses.

Each child is `python -m pdreal.cli serve --config <its YAML>` with one role; the parent waits
for each child's `PDREAL_READY` line (instances load their models in parallel, then the router
starts with their URLs). `LocalCluster` is what `pdreal serve` with no arguments runs, and what
the tests start on loopback. The cluster writes a fresh control-plane token (auth.py) into its
work folder for its children unless node.token_file names one.

Supervision (`LocalCluster.supervise`, called every SUPERVISE_INTERVAL_S by `pdreal serve`): a
child that exited, or an instance whose /health has answered 503 for `unhealthy_restart_s` (its
own scheduler restarts failed; a scheduler restart normally ends the 503 within seconds), is
restarted on the same port with the same config, and the reason is printed; the router stays up
throughout (it fails the requests in flight on a dead instance and routes to it again once it
answers). A child that does not answer (busy, or stopped with SIGSTOP) is left alone: it may
resume. A child that cannot start again is retried every RETRY_S.
"""

from __future__ import annotations

import json
import logging
import math
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from pdreal.serving.auth import write_token
from pdreal.serving.config import ServeConfig, dump_serve_config
from pdreal.serving.node import READY_PREFIX

SUPERVISE_INTERVAL_S = 0.5
UNHEALTHY_RESTART_S = 60.0
RETRY_S = 5.0

log = logging.getLogger(__name__)


@dataclass
class Child:
    role: str
    process: subprocess.Popen[str]
    url: str = ""
    log_file: IO[str] | None = None
    cfg: ServeConfig | None = None  # what it was started with (a restart reuses it, port pinned)
    restarts: int = 0
    sick_since_s: float = math.nan  # monotonic time of the first 503 of the current run of them

    def exit_reason(self) -> str:
        code = self.process.returncode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def stop(self, timeout_s: float = 15.0) -> int:
        self.terminate()
        return self.wait(timeout_s)

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 15.0) -> int:
        """Wait for a child told to stop; killed after `timeout_s`."""
        if self.process.poll() is None:
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not stop in %s s: killed", self.role, self.process.pid, timeout_s)
                self.process.kill()
                self.process.wait(5.0)
        if self.log_file is not None:
            self.log_file.close()
        return self.process.returncode


def spawn(cfg: ServeConfig, role: str, workdir: Path, name: str, log_dir: Path | None = None) -> Child:
    """Start one role in a child process (its config written to `workdir/<name>.yaml`)."""
    cfg = replace(cfg, node=replace(cfg.node, role=role))
    path = dump_serve_config(cfg, workdir / f"{name}.yaml")
    log_file = (log_dir / f"{name}.log").open("a") if log_dir is not None else None
    process = subprocess.Popen([sys.executable, "-m", "pdreal.cli", "serve", "--config", str(path)],
                               stdout=subprocess.PIPE, stderr=log_file, text=True)
    return Child(name, process, log_file=log_file, cfg=cfg)


def wait_ready(child: Child, timeout_s: float, give_up: Callable[[], bool] = lambda: False) -> Child:
    """Read the child's stdout until its READY line; raise naming the child if it dies or times out
    (or `give_up()` turns true: the cluster is being stopped)."""
    assert child.process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not give_up():
        if not selector.select(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
            if child.process.poll() is not None:
                break
            continue
        line = child.process.stdout.readline()
        if not line:
            break
        if line.startswith(READY_PREFIX):
            child.url = json.loads(line[len(READY_PREFIX):])["url"]
            return child
    child.stop(1.0)
    raise RuntimeError(f"{child.role} exited with code {child.process.returncode} before it was ready"
                       if child.process.returncode is not None else f"{child.role} not ready after {timeout_s} s")


@dataclass
class LocalCluster:
    """prefill_count prefill + decode_count decode instances + one router, all on this machine;
    when cfg.cluster.mode is colocated, cfg.cluster.colocated colocated instances instead."""

    cfg: ServeConfig
    workdir: Path
    prefill_count: int = 1
    decode_count: int = 1
    log_dir: Path | None = None
    children: dict[str, Child] = field(default_factory=dict)
    stopping: bool = False  # set by a signal handler: restarts give up
    unhealthy_restart_s: float = UNHEALTHY_RESTART_S

    @property
    def counts(self) -> dict[str, int]:
        """Instances to start per role."""
        if self.cfg.cluster.mode == "colocated":
            return {"colocated": self.cfg.cluster.colocated}
        return {"prefill": self.prefill_count, "decode": self.decode_count}

    @property
    def url(self) -> str:
        return self.children["router"].url

    def start(self, timeout_s: float = 300.0) -> str:
        """Start every process; returns the router URL."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        if not self.cfg.node.token_file:
            token_path = self.workdir / "control.token"
            write_token(token_path)
            self.cfg = replace(self.cfg, node=replace(self.cfg.node, token_file=str(token_path)))
        try:
            for role, count in self.counts.items():
                for i in range(count):
                    node = replace(self.cfg.node, instance_id=i, port=0)
                    self.children[f"{role}{i}"] = spawn(replace(self.cfg, node=node), role, self.workdir,
                                                        f"{role}{i}", self.log_dir)
            for child in self.children.values():
                wait_ready(child, timeout_s)
            urls = {role: [c.url for n, c in self.children.items() if n.startswith(role)]
                    for role in ("prefill", "decode", "colocated")}
            node = replace(self.cfg.node, port=self.cfg.node.port, prefill_urls=urls["prefill"],
                           decode_urls=urls["decode"], colocated_urls=urls["colocated"])
            self.children["router"] = spawn(replace(self.cfg, node=node), "router", self.workdir, "router", self.log_dir)
            wait_ready(self.children["router"], timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.url

    def supervise(self, say: Callable[[str], None], timeout_s: float = 120.0) -> None:
        """Restart every child that exited or whose engine died, saying why and when it is back."""
        for name, child in list(self.children.items()):
            why = self._trouble(child)
            if why:
                self._restart(name, child, why, say, timeout_s)

    def _trouble(self, child: Child) -> str:
        if child.process.poll() is not None:
            return child.exit_reason()
        if child.role == "router" or not child.url:
            return ""
        try:
            with urllib.request.urlopen(f"{child.url}/health", timeout=1.0):
                child.sick_since_s = math.nan
        except urllib.error.HTTPError as err:
            if err.code == 503 and math.isnan(child.sick_since_s):
                child.sick_since_s = time.monotonic()
        except OSError:  # busy or stopped: not a reason to restart it
            return ""
        sick_s = time.monotonic() - child.sick_since_s
        return f"unhealthy (/health 503 for {sick_s:.0f} s)" if sick_s >= self.unhealthy_restart_s else ""

    def _restart(self, name: str, child: Child, why: str, say: Callable[[str], None], timeout_s: float) -> None:
        if child.process.poll() is None:
            child.process.kill()
        child.stop(5.0)
        port = int(child.url.rsplit(":", 1)[1]) if child.url else 0
        assert child.cfg is not None
        cfg = replace(child.cfg, node=replace(child.cfg.node, port=port))
        say(f"pdreal serve: {name} (pid {child.process.pid}) {why}; restarting it on port {port} "
            f"(restart {child.restarts + 1}){self._log_hint(name)}")
        fresh = spawn(cfg, cfg.node.role, self.workdir, name, self.log_dir)
        fresh.restarts, fresh.url = child.restarts + 1, child.url
        self.children[name] = fresh
        try:
            wait_ready(fresh, timeout_s, lambda: self.stopping)
        except RuntimeError as exc:
            if self.stopping:
                return
            say(f"pdreal serve: {name} did not come back ({exc}); retrying in {RETRY_S:g} s")
            fresh.url = child.url
            time.sleep(RETRY_S)
            return
        say(f"pdreal serve: {name} (pid {fresh.process.pid}) is back at {fresh.url}")

    def _log_hint(self, name: str) -> str:
        return f"; its log: {self.log_dir / (name + '.log')}" if self.log_dir is not None else ""

    def stop(self) -> None:
        """Every child at once, the router first (no new work): the instances fail what is in
        flight and stop their schedulers while the router drains, so the whole cluster stops in
        about the slowest child's time, not the sum."""
        names = sorted(self.children, key=lambda n: n != "router")
        for name in names:
            self.children[name].terminate()
        for name in names:
            self.children[name].wait()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_local(cfg: ServeConfig, log_dir: Path | None = None, prefill: int = 1, decode: int = 1) -> int:
    """`pdreal serve` with role=all: start the cluster (prefill + decode instances, or
    cluster.colocated colocated ones when cluster.mode=colocated), print the URL, run until
    Ctrl-C / SIGTERM."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pdreal-serve-") as tmp:
        cluster = LocalCluster(cfg, Path(tmp), prefill, decode, log_dir=log_dir)
        what = (f"{cfg.cluster.colocated} colocated instance(s) ({cfg.cluster.colocated_schedule} schedule)"
                if cfg.cluster.mode == "colocated"
                else f"{prefill} prefill + {decode} decode instance(s) ({cfg.node.transfer_backend} KV transfer)")
        print(f"pdreal serve: starting {what} and a router (model {cfg.node.model})...", flush=True)
        stopping = {"signal": 0}

        def on_signal(signum: int, frame: object) -> None:
            stopping["signal"] = signum
            cluster.stopping = True

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            url = cluster.start()
            for name, child in cluster.children.items():
                print(f"pdreal serve: {name} (pid {child.process.pid}) at {child.url}", flush=True)
            print(f"pdreal serve: ready at {url}\n"
                  f"  curl {url}/v1/completions -H 'Content-Type: application/json' "
                  "-d '{\"prompt\": \"The capital of France is\", \"max_tokens\": 16, \"temperature\": 0}'\n"
                  f"  pdreal replay --url {url} scenario=chat scenario.num_requests=20 scenario.rate_rps=0.5 "
                  "--max-input-tokens 256 --max-output-tokens 32\n"
                  f"  metrics: {url}/metrics    stop: Ctrl-C", flush=True)
            while not stopping["signal"]:
                cluster.supervise(lambda line: print(line, flush=True))
                time.sleep(SUPERVISE_INTERVAL_S)
        finally:
            cluster.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0
