"""The new policies inside the simulator: rejected requests are recorded, cache-aware routing hits."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.run import run_simulation

Run = Callable[..., tuple[pd.DataFrame, dict]]


@pytest.fixture(scope="module")
def run() -> Run:
    register_configs()

    def simulate(*overrides: str) -> tuple[Config, dict]:
        with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
            cfg = to_config(compose("config", overrides=["perf=linear", "progress=false", *overrides]))
        out = run_simulation(cfg, progress=False)
        return out.trace, out.summary

    return simulate


def test_token_bucket_rejections_are_recorded_not_lost(run: Run) -> None:
    trace, summary = run("scenario=rag", "scenario.num_requests=120", "scenario.rate_rps=8", "policy=token_bucket",
                         "policy.token_bucket_rps=2", "policy.token_bucket_burst=2")
    rejected = trace[trace["status"] == "rejected"]
    assert len(trace) == 120 and 0 < len(rejected) < 120
    assert summary["rejected"] == len(rejected)
    assert rejected["failure_reason"].str.startswith("token_bucket: ").all()
    assert (rejected["prefill_instance"] == -1).all() and rejected["route_s"].isna().all()
    assert (rejected["finish_s"] == rejected["arrival_s"]).all()


def test_early_reject_sheds_overload_and_keeps_admitted_within_slo(run: Run) -> None:
    trace, _ = run("scenario=rag", "scenario.num_requests=200", "scenario.rate_rps=30", "policy=early_reject")
    rejected = trace["status"] == "rejected"
    assert rejected.sum() > 10
    assert trace.loc[rejected, "failure_reason"].str.startswith("early_reject: predicted").all()
    admitted = trace[~rejected]
    ttft = admitted["first_token_s"] - admitted["arrival_s"]
    assert (ttft <= 2.0).mean() >= 0.9


def test_early_reject_admits_everything_when_lightly_loaded(run: Run) -> None:
    trace, _ = run("scenario=rag", "scenario.num_requests=60", "scenario.rate_rps=0.5", "policy=early_reject")
    assert (trace["status"] == "finished").all()


def test_early_reject_admits_into_an_idle_cluster_whatever_the_slo(run: Run) -> None:
    # arrivals ~200 s apart: each request finds the cluster empty, so even a 1 ms SLO admits it
    trace, _ = run("scenario=rag", "scenario.num_requests=12", "scenario.rate_rps=0.005", "policy=early_reject",
                   "slo.ttft_s=0.001", "slo.tpot_s=0.001")
    gaps = trace["arrival_s"].diff().dropna()
    assert gaps.min() > 5.0
    assert (trace["status"] == "finished").all()


def test_cache_aware_routing_raises_the_prefix_hit(run: Run) -> None:
    common = ("scenario=agent", "scenario.num_requests=200", "cluster.prefill=4", "cluster.decode=2")
    hits = {}
    for policy in ("round_robin", "cache_aware"):
        trace, _ = run(*common, f"policy={policy}")
        hits[policy] = trace["cached_prefix_tokens"].sum() / trace["input_tokens"].sum()
    assert hits["cache_aware"] > hits["round_robin"] + 0.05


def test_length_buckets_split_short_and_long_prompts(run: Run) -> None:
    trace, _ = run("scenario=rag", "scenario.num_requests=100", "cluster.prefill=2", "cluster.decode=2",
                   "policy=length_buckets", "policy.length_buckets=[3000]")
    short = trace["input_tokens"] < 3000
    assert set(trace.loc[short, "prefill_instance"]) == {0}
    assert set(trace.loc[~short, "prefill_instance"]) == {1}
