"""Colocated serving: `pdreal serve --colocated N` options and config checks, and a live router +
1 colocated instance (tiny random model, subprocesses on loopback, no KV transfer) answering
completions with the single-process greedy tokens, its trace row, /steps, /stats, /metrics;
`pdreal profile` of the colocated engine."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")

from serving_helpers import get_text, post, sse, tiny_model_file  # noqa: E402

from pdreal.cli import build_parser, serve_overrides  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402

NUM_PAGES, PAGE = 32, 4  # 128-token KV pool
PROMPTS = [list(range(1, 30)), list(range(40, 45)), [7, 3] * 20]
MAX_NEW = 6


def test_serve_colocated_flags_become_cluster_overrides() -> None:
    args = build_parser().parse_args(["serve", "--colocated", "3", "--schedule", "prefill_priority", "node.port=0"])
    overrides = serve_overrides(args)
    assert overrides == ["node.port=0", "cluster.mode=colocated", "cluster.colocated=3",
                         "cluster.colocated_schedule=prefill_priority"]
    cfg = load_serve_config(None, overrides)
    assert (cfg.cluster.mode, cfg.cluster.colocated, cfg.cluster.colocated_schedule) == ("colocated", 3,
                                                                                        "prefill_priority")
    with pytest.raises(ValueError, match="excludes --prefill"):
        serve_overrides(build_parser().parse_args(["serve", "--colocated", "1", "--prefill", "2"]))


@pytest.mark.parametrize(("overrides", "needle"), [
    (["cluster.mode=shared"], "cluster.mode"),
    (["cluster.colocated_schedule=fifo"], "colocated_schedule.*fifo"),
    (["node.role=router", "node.colocated_urls=[http://a]", "node.prefill_urls=[http://b]"], "excludes"),
    (["node.role=router"], "node.colocated_urls"),
])
def test_serve_config_rejects_bad_colocated_settings(overrides: list[str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        load_serve_config(None, overrides)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    work = tmp_path_factory.mktemp("colocated")
    cfg = load_serve_config(None, [f"node.model={tiny_model_file(work)}", "cluster.mode=colocated",
                                   "cluster.colocated=1", f"node.num_pages={NUM_PAGES}",
                                   f"cluster.page_size_tokens={PAGE}", "cluster.chunk_size_tokens=16",
                                   "node.stats_interval_s=0.1"])
    with LocalCluster(cfg, work / "cluster", log_dir=work) as running:
        yield running
    log = (work / "colocated0.log").read_text()
    assert "invariants" not in log, log  # checked by the instance as it stopped


@pytest.fixture(scope="module")
def reference(cluster) -> list[list[int]]:  # noqa: ANN001
    from pdreal.engine.common import ModelRunner
    from pdreal.engine.generate import generate
    from pdreal.model.sampling import SamplingParams
    from pdreal.model.weights import load_model
    from pdreal.serving.node import engine_config, model_source

    runner = ModelRunner(load_model(model_source(cluster.cfg)).model, engine_config(cluster.cfg, "colocated"))
    sampling = SamplingParams(max_new_tokens=MAX_NEW, ignore_eos=True)
    return generate(runner, PROMPTS, [sampling] * len(PROMPTS))


@pytest.mark.real
@pytest.mark.slow
def test_completions_equal_single_process_greedy(cluster, reference) -> None:  # noqa: ANN001
    def call(i: int) -> tuple[list[int], dict]:
        body = {"input_ids": PROMPTS[i], "rid": 100 + i, "stream": i == 1,
                "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}}
        if i == 1:
            events = sse(f"{cluster.url}/generate", body)
            return [t for e in events for t in e.get("output_ids", [])], events[-1]["meta_info"]
        status, out = post(f"{cluster.url}/generate", body)
        assert status == 200, out
        return out["output_ids"], out["meta_info"]

    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # concurrent: one engine batches them
        results = list(pool.map(call, range(len(PROMPTS))))
    assert [ids for ids, _ in results] == reference
    row = results[0][1]["trace"]
    assert row["request_id"] == 100 and row["status"] == "finished" and row["mode"] == "colocated"
    assert row["prefill_instance"] == row["decode_instance"] == 0 and row["transfer_bytes"] == 0
    assert (row["arrival_s"] <= row["route_s"] <= row["prefill_waiting_enter_s"] <= row["prefill_start_s"]
            <= row["prefill_end_s"] <= row["first_token_s"] <= row["last_token_s"])
    assert len(row["token_times_s"]) == MAX_NEW


@pytest.mark.real
@pytest.mark.slow
def test_stats_steps_metrics_and_bad_requests(cluster) -> None:  # noqa: ANN001
    status, out = post(f"{cluster.url}/v1/completions", {"prompt": [5] * 200, "max_tokens": 4})
    assert status == 400 and "200 token ids exceed the largest KV pool (128 tokens)" in out["error"]["message"], out
    status, out = post(f"{cluster.url}/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0})
    assert status == 200 and out["usage"]["completion_tokens"] == 3
    assert json.loads(get_text(f"{cluster.url}/health"))["status"] == "ok"
    instance = cluster.children["colocated0"].url
    stats = json.loads(get_text(f"{instance}/stats"))
    assert stats["role"] == "colocated" and stats["engine"]["colocated_schedule"] == "mixed"
    steps = json.loads(get_text(f"{instance}/steps"))["steps"]
    assert {"prefill", "decode"} <= {s["kind"] for s in steps} <= {"prefill", "decode", "mixed"}
    decode_part = {"prefill": lambda s: s["decode_seqs"] == 0, "decode": lambda s: s["decode_seqs"] == s["num_seqs"],
                   "mixed": lambda s: 0 < s["decode_seqs"] < s["num_seqs"]}
    assert all(decode_part[s["kind"]](s) for s in steps)
    router = parse_metrics(get_text(f"{cluster.url}/metrics"))
    assert sample_value(router, "pdreal_instance_healthy", role="colocated") == 1
    assert sample_value(router, "pdreal_kv_total_tokens", role="colocated") == NUM_PAGES * PAGE
    samples = parse_metrics(get_text(f"{instance}/metrics"))
    assert sample_value(samples, "pdreal_up") == 1 and sample_value(samples, "pdreal_transfer_rooms") == 0
    assert {labels["queue"] for labels, _ in samples["pdreal_queue_requests"]} == {"waiting", "running"}


@pytest.mark.real
def test_profile_reports_the_colocated_engine(tmp_path) -> None:  # noqa: ANN001
    import argparse

    from analysis.fidelity.facts import EngineFacts, sim_overrides
    from pdreal.profile import run_profile_command

    args = argparse.Namespace(out=tmp_path / "profile", quick=True, repeats=1, config=None,
                              overrides=[f"node.model={tiny_model_file(tmp_path)}", "cluster.page_size_tokens=8",
                                         "node.num_pages=128", "cluster.mode=colocated",
                                         "cluster.colocated_schedule=prefill_priority", "policy.new_token_ratio=0.5"])
    assert run_profile_command(args) == 0
    data = json.loads((tmp_path / "profile" / "engine.json").read_text())
    assert (data["mode"], data["colocated_schedule"], data["new_token_ratio"]) == ("colocated", "prefill_priority", 0.5)
    assert data["engine"]["colocated_schedule"] == "prefill_priority"
    assert data["prefill_step_overhead_s"] > 0 and data["decode_step_overhead_s"] > 0
    facts = EngineFacts.load(tmp_path / "profile" / "engine.json")
    overrides = sim_overrides(facts, tmp_path / "profile" / "profile.csv", "smollm2_135m", 1, 1, colocated=2)
    assert {"cluster.mode=colocated", "cluster.colocated=2", "cluster.colocated_schedule=prefill_priority",
            "policy.new_token_ratio=0.5", "cluster.kv_capacity_tokens=1024"} <= set(overrides)
