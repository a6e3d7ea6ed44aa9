"""The router against fake instances (aiohttp servers in this process): a finished decode half
makes the request finished however late or badly its prefill half reports, and marking an
instance unhealthy ends its in-flight halves at once, aborting the other half."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

pytest.importorskip("torch")
aiohttp = pytest.importorskip("aiohttp")

from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402

from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdreal.serving.config import ServeConfig  # noqa: E402
from pdreal.serving.router import FinalEvent, Router  # noqa: E402
from pdreal.serving.upstream import Upstream  # noqa: E402


def _final(status: str, reason: str = "") -> dict[str, Any]:
    return {"finished": True, "status": status, "failure_reason": reason, "token_ids": [], "row": {}}


class FakeInstance:
    """/generate writes `lines` (pausing `pause_s` before line `pause_at`); /abort is recorded."""

    def __init__(self, lines: list[dict[str, Any]], pause_at: int = -1, pause_s: float = 0.0) -> None:
        self.lines, self.pause_at, self.pause_s = lines, pause_at, pause_s
        self.aborts: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/abort", self.abort)
        return app

    async def generate(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for i, line in enumerate(self.lines):
            if i == self.pause_at:
                await asyncio.sleep(self.pause_s)
            await response.write((json.dumps(line) + "\n").encode())
        return response

    async def abort(self, request: web.Request) -> web.Response:
        self.aborts.append((await request.json())["reason"])
        return web.json_response({"ok": True})


async def _serve(prefill: FakeInstance, decode: FakeInstance, during: Any = None) -> tuple[list[Any], float, Router]:
    async with TestServer(prefill.app()) as p_server, TestServer(decode.app()) as d_server:
        up_p = Upstream("prefill", 0, str(p_server.make_url("")).rstrip("/"), healthy=True)
        up_d = Upstream("decode", 0, str(d_server.make_url("")).rstrip("/"), healthy=True)
        router = Router(ServeConfig(), [up_p], [up_d])
        router.prefill_row_grace_s = 0.3
        async with aiohttp.ClientSession() as session:
            router.session = session
            start, events = time.monotonic(), []
            async for event in router.generate((1, 2, 3), SamplingParams(max_new_tokens=3), 0):
                events.append(event)
                if during is not None and len(events) == 1:
                    during(router)
            elapsed = time.monotonic() - start
            await asyncio.sleep(0.2)  # let the background aborts land
        return events, elapsed, router


TOKENS = [{"token_ids": [5]}, {"token_ids": [6]}, {"token_ids": [7]}, _final("finished")]


def test_a_late_prefill_report_does_not_fail_a_finished_request() -> None:
    prefill = FakeInstance([_final("finished")], pause_at=0, pause_s=3.0)  # a long forward on that instance
    events, elapsed, router = asyncio.run(_serve(prefill, FakeInstance(TOKENS)))
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.status == "finished" and final.output_ids == (5, 6, 7)
    assert elapsed < 2.0  # the grace (0.3 s here), not the prefill's 3 s
    assert router.metrics.inflight == 0


def test_a_prefill_failure_after_the_decode_finished_is_still_finished() -> None:
    prefill = FakeInstance([_final("failed", "transfer status lost")], pause_at=0, pause_s=0.1)
    events, _, _ = asyncio.run(_serve(prefill, FakeInstance(TOKENS, pause_at=3, pause_s=0.0)))
    assert events[-1].status == "finished" and events[-1].failure_reason == ""


def test_an_instance_marked_unhealthy_fails_its_halves_at_once() -> None:
    decode = FakeInstance(TOKENS, pause_at=1, pause_s=30.0)  # one token, then silence (SIGSTOP)
    prefill = FakeInstance([_final("finished")], pause_at=0, pause_s=30.0)  # never reports in time

    def stall_detected(router: Router) -> None:
        router.decode[0]._mark_unhealthy("2 failed /stats polls (TimeoutError)")

    events, elapsed, router = asyncio.run(_serve(prefill, decode, during=stall_detected))
    final = events[-1]
    assert final.status == "failed" and final.output_ids == (5,)
    assert final.failure_reason.startswith("decode:0 (http://") and "marked unhealthy by the router" in final.failure_reason
    assert elapsed < 2.0
    assert prefill.aborts and prefill.aborts[0].startswith("decode half failed: decode:0")
    assert router.prefill[0].watchers == {} and router.decode[0].watchers == {}
