"""Flat result rows: one per simulated configuration, the unit of every sweep table."""

from __future__ import annotations

from typing import Any

from pdsim.config import Config
from pdsim.search.goodput import GoodputResult

RESULT_FILE = "result.json"


def gpus_of(cfg: Config) -> int:
    c = cfg.cluster
    if c.mode == "colocated":
        return c.colocated * c.parallel("colocated").gpus
    return c.prefill * c.parallel("prefill").gpus + c.decode * c.parallel("decode").gpus


def result_row(cfg: Config, summary: dict[str, Any], goodput: GoodputResult | None = None) -> dict[str, Any]:
    """One flat row describing a configuration and its outcome (for sweep tables)."""
    c = cfg.cluster
    row: dict[str, Any] = {
        "scenario": cfg.scenario.name, "model": cfg.model.name, "hardware": cfg.hardware.name,
        "perf": cfg.perf.kind, "mode": c.mode,
        "prefill": c.prefill if c.mode == "disaggregated" else 0,
        "decode": c.decode if c.mode == "disaggregated" else 0,
        "colocated": c.colocated if c.mode == "colocated" else 0,
        "prefill_tp": c.prefill_tp, "decode_tp": c.decode_tp, "colocated_tp": c.colocated_tp,
        "prefill_dp": c.prefill_dp, "decode_dp": c.decode_dp, "colocated_dp": c.colocated_dp,
        "prefill_moe_ep": c.prefill_moe_ep, "decode_moe_ep": c.decode_moe_ep, "colocated_moe_ep": c.colocated_moe_ep,
        "prefill_moe_a2a": c.prefill_moe_a2a, "decode_moe_a2a": c.decode_moe_a2a,
        "colocated_moe_a2a": c.colocated_moe_a2a,
        "gpus": gpus_of(cfg), "routing": cfg.policy.routing, "admission": cfg.policy.admission,
        "slo_ttft_s": cfg.slo.ttft_s, "slo_tpot_s": cfg.slo.tpot_s, "seed": cfg.seed,
        "rate_rps": summary["offered_rate_rps"], "requests": summary["requests"],
        "attainment_both": summary["attainment"]["both"],
        "attainment_ttft": summary["attainment"]["ttft"], "attainment_tpot": summary["attainment"]["tpot"],
    }
    row.update(_throughputs(summary))
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for stat in ("mean", "p50", "p90", "p99"):
            row[f"{metric[:-2]}_{stat}_s"] = summary[metric][stat]
    itl = summary.get("itl_s") or {}
    for stat in ("mean", "p50", "p90", "p99"):
        row[f"itl_{stat}_s"] = itl.get(stat, float("nan"))
    if goodput is not None:
        row["goodput_rps"] = goodput.goodput_rps
        row["goodput_per_gpu_rps"] = goodput.per_gpu(row["gpus"])
    return row


def _throughputs(summary: dict[str, Any]) -> dict[str, Any]:
    """Throughput columns, and the closed loop's (concurrency 0: open loop)."""
    loop = summary.get("closed_loop") or {}
    per_user = summary.get("tokens_per_s_per_user") or {}
    return {
        "concurrency": loop.get("concurrency", 0),
        "steady_state_reached": loop.get("steady_state_reached", True),
        "throughput_rps": summary.get("throughput_rps", float("nan")),
        "output_tokens_per_s": summary.get("output_tokens_per_s", float("nan")),
        "output_tokens_per_s_per_gpu": summary.get("output_tokens_per_s_per_gpu", float("nan")),
        "tokens_per_s_per_user_mean": per_user.get("mean", float("nan")),
        "tokens_per_s_per_user_p50": per_user.get("p50", float("nan")),
    }
