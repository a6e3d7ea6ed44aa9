"""The messages between an instance's HTTP process and its scheduler process (msgpack over ZMQ).

Two PUSH/PULL pipes on ipc:// sockets in a private (0700) folder the HTTP process creates and
binds; the scheduler connects:

    commands  HTTP -> scheduler   ("add", request) ("abort", id, reason) ("fail_peer", addr, reason) ("stop",)
    events    scheduler -> HTTP   ("progress", text) ("ready", facts, stats) ("batch", outputs, stats, steps, counters)
                                  ("stopped", invariant error or "")

A request crosses as a flat list (its SamplingParams as a dict), an output as
[request_id, token_ids, finished, status, reason, row, logprobs, prompt_logprobs]; a `batch` carries one loop iteration's
outputs with the stats snapshot and the step records that /stats, /metrics and /steps serve.
msgpack keeps floats (NaN too) and refuses anything it cannot encode, so a bad value fails loudly.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, astuple
from pathlib import Path
from typing import Any

import msgpack

from pdreal.engine.types import EngineRequest, EngineStats, RequestOutput, StepRecord
from pdreal.model.sampling import SamplingParams

COMMANDS_FILE, EVENTS_FILE, CONFIG_FILE = "commands.sock", "events.sock", "serve.yaml"


def pack(message: tuple[Any, ...] | list[Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: bytes) -> list[Any]:
    message = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise ValueError(f"IPC message must be a non-empty list starting with its kind, got {message!r:.80}")
    return message


def encode_request(req: EngineRequest) -> list[Any]:
    sampling = asdict(req.sampling)
    sampling["stop_token_ids"] = list(req.sampling.stop_token_ids)
    return [req.request_id, list(req.input_ids), sampling, req.bootstrap_room, req.bootstrap_addr, req.arrival_s]


def decode_request(data: list[Any]) -> EngineRequest:
    rid, ids, sampling, room, addr, arrival = data
    params = SamplingParams(**{**sampling, "stop_token_ids": tuple(sampling["stop_token_ids"])})
    return EngineRequest(rid, tuple(ids), params, bootstrap_room=room, bootstrap_addr=addr, arrival_s=arrival)


def encode_output(out: RequestOutput) -> list[Any]:
    return [out.request_id, list(out.token_ids), out.finished, out.status, out.failure_reason, out.row,
            list(out.logprobs), list(out.prompt_logprobs)]


def decode_output(data: list[Any]) -> RequestOutput:
    rid, ids, finished, status, reason, row, logprobs, prompt_logprobs = data
    return RequestOutput(rid, tuple(ids), finished, status, reason, row, tuple(logprobs), tuple(prompt_logprobs))


def encode_stats(stats: EngineStats) -> list[Any]:
    return [stats.queues, stats.kv_used_tokens, stats.kv_total_tokens, stats.num_finished, stats.num_failed]


def decode_stats(data: list[Any]) -> EngineStats:
    return EngineStats(*data)


def encode_steps(records: list[StepRecord]) -> list[list[Any]]:
    return [list(astuple(r)) for r in records]


def decode_steps(data: list[list[Any]]) -> list[StepRecord]:
    return [StepRecord(*r) for r in data]


class IpcPaths:
    """The socket addresses of one instance, in a fresh private folder (removed by `cleanup`)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="pdreal-ipc-"))
        os.chmod(self.folder, 0o700)

    @property
    def config_file(self) -> Path:
        """Where the HTTP process writes the serve config its scheduler reads."""
        return self.folder / CONFIG_FILE

    @property
    def commands(self) -> str:
        return f"ipc://{self.folder / COMMANDS_FILE}"

    @property
    def events(self) -> str:
        return f"ipc://{self.folder / EVENTS_FILE}"

    def cleanup(self) -> None:
        for name in (COMMANDS_FILE, EVENTS_FILE, CONFIG_FILE):
            (self.folder / name).unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass
