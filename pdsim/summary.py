"""The one-screen terminal summary of a run (plain text; the JSON summary holds everything)."""

from __future__ import annotations

from typing import Any


def format_summary(summary: dict[str, Any], title: str) -> str:
    """Render the summary dict from pdsim.metrics.summarize as an aligned table."""
    lines = [title, "=" * len(title)]
    lines.append(
        f"requests {summary['requests']}  finished {summary['finished']}  "
        f"failed {summary['failed']}  rejected {summary['rejected']}  "
        f"span {summary['duration_s']:.1f} s  offered {summary['offered_rate_rps']:.2f} req/s"
    )
    lines.append(
        f"throughput {summary['throughput_rps']:.2f} req/s, "
        f"{summary['output_tokens_per_s']:.0f} output tok/s, "
        f"prefix-cache hit {100 * summary['cached_prefix_fraction']:.1f}% of prompt tokens"
    )
    lines.extend(_closed_loop_lines(summary))
    lines.append("")
    lines.append(f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    rows = (("ttft_s", "TTFT s"), ("tpot_s", "TPOT s"), ("e2e_s", "E2E s"), ("itl_s", "ITL s"), ("tbt_mooncake_s", "TBT s"))
    for key, label in rows:
        row = summary.get(key)
        if row is None:
            continue
        lines.append(f"{label:<10}" + "".join(f"{_num(row[k]):>10}" for k in ("mean", "p50", "p90", "p99")))
    tiers = summary.get("kv_tiers")
    if tiers:
        lines.append(
            f"KV tiers: prefix hits GPU {_pct(tiers['hit_ratio_gpu'])}, host {_pct(tiers['hit_ratio_host'])}, "
            f"SSD {_pct(tiers['hit_ratio_ssd'])}, store {_pct(tiers['hit_ratio_store'])}; "
            f"{tiers['loads_taken']:.0f} loads taken, {tiers['loads_rejected']:.0f} rejected (recompute cheaper)"
        )
    slo, att = summary["slo"], summary["attainment"]
    lines.append("")
    lines.append(
        f"SLO TTFT <= {slo['ttft_s']} s, TPOT <= {slo['tpot_s']} s: attainment "
        f"TTFT {_pct(att['ttft'])}, TPOT {_pct(att['tpot'])}, both {_pct(att['both'])} "
        f"(target {_pct(slo['target'])}: {'met' if summary['meets_slo_target'] else 'MISSED'})"
    )
    defs = summary["definitions"]
    if summary.get("criterion", "joint") != "joint":
        lines.append(f"goodput criterion: {defs['criterion_' + summary['criterion']]}")
    ttft_key = summary.get("ttft_definition", "standard")
    lines.append(f"TTFT = {defs['ttft' if ttft_key == 'standard' else 'ttft_' + ttft_key]}")
    tpot_key = summary["tpot_definition"]
    lines.append(f"TPOT = {defs[{'standard': 'tpot', 'distserve': 'tpot_distserve'}.get(tpot_key, tpot_key)]}")
    if summary.get("tbt_mooncake_s") is not None:
        lines.append(f"TBT = {defs['tbt_mooncake']}")
    return "\n".join(lines)


def _closed_loop_lines(summary: dict[str, Any]) -> list[str]:
    """Per-GPU and per-user throughput; under a closed loop, which requests the window counts."""
    per_user = summary.get("tokens_per_s_per_user") or {}
    lines = []
    if summary.get("gpus"):
        lines.append(
            f"{_num(summary['output_tokens_per_s_per_gpu'])} output tok/s per GPU ({summary['gpus']} GPUs), "
            f"{_num(per_user.get('mean', float('nan')))} tok/s per user (mean of 1/TPOT; "
            f"median {_num(per_user.get('p50', float('nan')))})"
        )
    loop = summary.get("closed_loop")
    if loop:
        if loop["steady_state_reached"]:
            lines.append(
                f"closed loop: concurrency {loop['concurrency']}, {loop['sent']} sent; steady-state window "
                f"{loop['window_start_s']:.2f}-{loop['window_end_s']:.2f} s counts {loop['counted_requests']} "
                f"(warm-up: the first {loop['warmup_requests']}; drain: after the first idle client)"
            )
        else:
            lines.append(
                f"WARNING closed loop: concurrency {loop['concurrency']} with {loop['sent']} requests never "
                f"reached a steady state: statistics are over every request (raise scenario.num_requests)"
            )
    return lines


def _num(value: float) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"


def _pct(value: float) -> str:
    return "-" if value != value else f"{100 * value:.1f}%"
