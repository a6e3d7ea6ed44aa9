"""Serving pieces in one process: Prometheus text, serve config, bootstrap server and heartbeat,
request parsing, replay planning, and `pdreal profile` feeding pdsim's table perf model."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
aiohttp = pytest.importorskip("aiohttp")

from aiohttp import web  # noqa: E402
from serving_helpers import tiny_model_file  # noqa: E402

from pdreal.replay import PlannedRequest, ReplayOptions, plan_requests, prompt_ids  # noqa: E402
from pdreal.serving.bootstrap import (  # noqa: E402
    BootstrapTable,
    ConnectionCache,
    HeartbeatChecker,
    add_bootstrap_routes,
)
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.metrics import MetricsRegistry, parse_metrics, sample_value  # noqa: E402
from pdreal.serving.requests import TextCodec, parse_completion, parse_generate  # noqa: E402
from pdsim.workload import make_workload  # noqa: E402


def test_metrics_text_round_trips() -> None:
    reg = MetricsRegistry()
    reg.counter("x_total", "things").inc(2, kind='a"b')
    hist = reg.histogram("lat_seconds", "latency", (0.1, 1.0))
    for value in (0.05, 0.5, 5.0):
        hist.observe(value, side="p")
    samples = parse_metrics(reg.render())
    assert sample_value(samples, "x_total", kind='a\\"b') == 2
    assert [v for _, v in samples["lat_seconds_bucket"]] == [1, 2, 3]
    assert sample_value(samples, "lat_seconds_count", side="p") == 3
    with pytest.raises(ValueError, match="line 1"):
        parse_metrics("not a sample line at all {")


def test_serve_config_groups_and_errors(tmp_path: Path) -> None:
    cfg = load_serve_config(None, ["policy=least_loaded", "cluster.page_size_tokens=8", "faults.heartbeat_misses=5"])
    assert (cfg.policy.routing, cfg.cluster.page_size_tokens, cfg.faults.heartbeat_misses) == ("least_loaded", 8, 5)
    path = tmp_path / "node.yaml"
    path.write_text("node: {role: decode, port: 9000}\npolicy: round_robin\n")
    assert load_serve_config(path).node.role == "decode"
    with pytest.raises(ValueError, match="nodee"):
        load_serve_config(None, ["nodee.port=1"])
    with pytest.raises(ValueError, match="node.role: unknown value 'boss'"):
        load_serve_config(None, ["node.role=boss"])
    with pytest.raises(ValueError, match="policy='nope'"):
        load_serve_config(None, ["policy=nope"])


async def _bootstrap_server(table: BootstrapTable) -> tuple[web.AppRunner, str]:
    app = web.Application()
    add_bootstrap_routes(app, table, lambda: True)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"127.0.0.1:{runner.addresses[0][1]}"


def test_bootstrap_routes_cache_and_heartbeat() -> None:
    async def scenario() -> None:
        runner, bootstrap = await _bootstrap_server(BootstrapTable())
        async with aiohttp.ClientSession() as session:
            url = f"http://{bootstrap}/route"
            async with session.put(url, json={"engine_rank": 0, "addr": "127.0.0.1:5555"}) as resp:
                assert resp.status == 200
            async with session.put(url, json={"engine_rank": 0, "addr": "nope"}) as resp:
                assert resp.status == 400 and "host:port" in (await resp.json())["error"]
            async with session.get(url, params={"engine_rank": "3"}) as resp:
                assert resp.status == 404
            async with session.get(url) as resp:
                assert (await resp.json())["ranks"]["0"]["addr"] == "127.0.0.1:5555"
            cache = ConnectionCache(session)
            assert (await cache.resolve(bootstrap)).addr == "127.0.0.1:5555"
            dead: list[str] = []
            checker = HeartbeatChecker(cache, 0.05, 2, lambda entry, reason: dead.append(reason))
            task = asyncio.create_task(checker.run())
            await asyncio.sleep(0.2)
            assert not dead and cache.get(bootstrap) is not None
            await runner.cleanup()  # the prefill's bootstrap server goes away
            await asyncio.sleep(0.4)
            task.cancel()
            assert len(dead) == 1 and "missed 2 heartbeats" in dead[0] and cache.get(bootstrap) is None

    asyncio.run(scenario())


def test_request_parsing_names_bad_fields() -> None:
    codec = TextCodec(None, vocab_size=100)
    req = parse_completion({"prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0, "stop": "x"}, codec)
    assert req.input_ids == (1, 2, 3) and req.sampling.max_new_tokens == 5 and req.stop == ("x",)
    for body, needle in [({"prompt": "text"}, "no tokenizer"), ({"prompt": [1], "n": 200}, "'n' must be >= 1 with n x prompts <= 128, got n=200"),
                         ({"prompt": [1], "temperature": "hot"}, "'temperature' must be a number"),
                         ({"prompt": [100]}, "token id 100")]:
        with pytest.raises(ValueError, match=needle):
            parse_completion(body, codec)
    with pytest.raises(ValueError, match="unknown fields"):
        parse_generate({"input_ids": [1], "sampling_params": {"max_tokens": 3}}, codec)
    assert parse_generate({"input_ids": [1], "rid": 7}, codec).request_id == 7


def test_replay_plan_bounds_and_prompts() -> None:
    workload = make_workload("w", np.array([10.0, 11.0, 12.0, 20.0]), np.array([600, 50, 70, 80]),
                             np.array([9, 9, 9, 9]), hash_lists=[np.array([1, 2]), np.array([1]), np.array([]),
                                                                 np.array([])], block_tokens=32)
    plan = plan_requests(workload, ReplayOptions(speedup=2.0, max_duration_s=4.0, max_input_tokens=100))
    assert [(r.request_id, r.send_s, r.input_tokens) for r in plan] == [(0, 0.0, 100), (1, 0.5, 50), (2, 1.0, 70)]
    assert len(plan_requests(workload, ReplayOptions(max_requests=2))) == 2
    a, b = prompt_ids(plan[0], 1000, 0), prompt_ids(plan[1], 1000, 0)
    assert len(a) == 100 and a[:32] == b[:32] and a[32:64] != b[32:64]  # hash block 1 shared
    assert prompt_ids(PlannedRequest(5, 0.0, 40, 1), 1000, 0) == prompt_ids(PlannedRequest(5, 0.0, 40, 1), 1000, 0)
    with pytest.raises(ValueError, match="speedup"):
        ReplayOptions(speedup=0)
    with pytest.raises(ValueError, match="endpoint must be one of"):
        ReplayOptions(endpoint="chat")


def test_profiled_decode_batches_mix_context_lengths() -> None:
    from pdreal.profile import ProfileGrid, ragged_contexts

    assert ragged_contexts(64, 1) == [64]
    assert ragged_contexts(64, 2) == [32, 96] and ragged_contexts(64, 4) == [32, 53, 74, 97]
    assert sum(ragged_contexts(1024, 32)) == 32 * 1024 and min(ragged_contexts(1024, 32)) == 512
    grid = ProfileGrid(decode_seqs=(2,), decode_context=(64,), prefill_seqs=(1,), prefill_tokens=(16,),
                       chunk_tokens=(), chunk_context=(), ragged_decode=True)
    assert grid.decode_contexts(64, 2) == [32, 96]
    assert grid.pages_needed(16) == 3 + 7  # ceil(33 / 16) + ceil(97 / 16): the longest is 1.5x the mean
    uniform = ProfileGrid(**{**asdict(grid), "ragged_decode": False})
    assert uniform.decode_contexts(64, 2) == [64, 64] and uniform.pages_needed(16) == 2 * 5


def test_profile_grid_flags_replace_the_grids_lists(capsys: pytest.CaptureFixture[str]) -> None:
    """--prefill-tokens and the other lists replace the chosen grid's (quick or default) and keep
    the rest; a bad list is an argparse error naming it; ProfileGrid still validates values."""
    from pdreal.cli import build_parser
    from pdreal.profile import QUICK_GRID, ProfileGrid, grid_from_args

    parser = build_parser()
    args = parser.parse_args(["profile", "--quick", "--prefill-seqs", "1,8", "--decode-context", "256,1024",
                              "--repeats", "4"])
    grid = grid_from_args(args)
    assert (grid.prefill_seqs, grid.decode_context, grid.repeats) == ((1, 8), (256, 1024), 4)
    assert (grid.prefill_tokens, grid.decode_seqs, grid.chunk_tokens) == (
        QUICK_GRID.prefill_tokens, QUICK_GRID.decode_seqs, QUICK_GRID.chunk_tokens)
    assert grid_from_args(parser.parse_args(["profile"])) == ProfileGrid()
    with pytest.raises(SystemExit):
        parser.parse_args(["profile", "--decode-seqs", "1,x"])
    assert "--decode-seqs: expected comma-separated integers, got '1,x'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="decode_seqs"):
        grid_from_args(parser.parse_args(["profile", "--decode-seqs", "0,4"]))


@pytest.mark.real
def test_profile_writes_a_table_pdsim_loads(tmp_path: Path) -> None:
    pytest.importorskip("mooncake.engine")
    from pdreal.profile import run_profile_command
    from pdsim.perf.table import load_table

    args = argparse.Namespace(out=tmp_path / "profile", quick=True, repeats=1, config=None,
                              overrides=[f"node.model={tiny_model_file(tmp_path)}", "cluster.page_size_tokens=8",
                                         "node.num_pages=128"])
    assert run_profile_command(args) == 0
    table = load_table(tmp_path / "profile" / "profile.csv", "tiny", "cpu", 1)
    assert table.prefill_time_s([(64, 0)]) > 0 and table.decode_time_s(4, 4 * 100) > 0
    facts = json.loads((tmp_path / "profile" / "engine.json").read_text())
    assert (facts["kv_capacity_tokens"], facts["page_size_tokens"]) == (128 * 8, 8)
    assert facts["max_running_requests"] >= 1 and facts["chunk_size_tokens"] >= 0
    assert facts["transfer"]["bandwidth_bytes_per_s"] > 0
    # each side's steps were timed around their forwards (a forward the timer missed makes it 0)
    assert facts["prefill_step_overhead_s"] > 0 and facts["decode_step_overhead_s"] > 0


@pytest.mark.real
def test_profile_per_tp_shares_one_table(tmp_path: Path) -> None:
    """`pdreal profile --tp 2` times the TP runner's forwards; rows carry a tp column and a profile
    of another TP size into the same folder keeps them (pdsim reads each side's TP)."""
    pytest.importorskip("mooncake.engine")
    from pdreal.profile import run_profile_command
    from pdsim.perf.table import load_table

    overrides = [f"node.model={tiny_model_file(tmp_path)}", "cluster.page_size_tokens=8", "node.num_pages=128"]
    for tp in (2, 1):
        args = argparse.Namespace(out=tmp_path / "profile", quick=True, repeats=1, config=None, tp=tp,
                                  overrides=overrides)
        assert run_profile_command(args) == 0
        facts = json.loads((tmp_path / "profile" / "engine.json").read_text())
        assert facts["tp_size"] == tp and facts["model_spec"]["num_kv_heads"] == 2
    tables = {tp: load_table(tmp_path / "profile" / "profile.csv", "tiny", "cpu", tp) for tp in (1, 2)}
    assert all(t.prefill_time_s([(64, 0)]) > 0 and t.decode_time_s(4, 400) > 0 for t in tables.values())
    assert tables[1].prefill_time_s([(64, 0)]) != tables[2].prefill_time_s([(64, 0)])
    with pytest.raises(ValueError, match="tp=4"):
        load_table(tmp_path / "profile" / "profile.csv", "tiny", "cpu", 4)


def test_router_decides_with_the_shared_policy() -> None:
    from pdreal.serving.router import Router
    from pdreal.serving.upstream import Upstream
    from pdsim.policy import RequestView

    cfg = load_serve_config(None, ["policy.admission=threshold", "policy.max_queued_requests=1"])
    stats = {"kv_total_tokens": 1024, "kv_used_tokens": 0, "queues": {}}
    prefill = [Upstream("prefill", i, f"http://p{i}", healthy=True, stats=stats) for i in range(2)]
    decode = [Upstream("decode", 0, "http://d0", healthy=True, stats=stats)]
    router = Router(cfg, prefill, decode)
    view = RequestView(0, 10, 4)
    picks = [router._choose(view, 0.0)[0][0].index for _ in range(3)]
    assert picks == [0, 1, 0]  # round_robin over the prefill instances
    prefill[0].queued[1] = prefill[1].queued[2] = 10  # each holds one queued request: the limit
    pair, _, status, reason = router._choose(view, 0.0)
    assert pair is None and status == "rejected" and reason.startswith("threshold:")
    prefill[1].healthy = False
    prefill[0].queued.clear()
    assert router._choose(view, 0.0)[0][0].index == 0
