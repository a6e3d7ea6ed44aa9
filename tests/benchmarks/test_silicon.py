"""benchmarks/silicon.py: silicon rows -> pdsim runs or named gaps, predictions, error tables.

A tiny hand-made CSV (silicon_dev.csv's header) in tmp_path; AIConfigurator is never called.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import silicon  # noqa: E402
import silicon_errors  # noqa: E402
from silicon_harness import harness_of  # noqa: E402
from silicon_parse import load_catalog, parse_row  # noqa: E402
from silicon_rows import TRTLLM_MOE_DEFAULT, plan_row  # noqa: E402

HEADER = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
          "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
          "prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,"
          "prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,"
          "decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,"
          "silicon_tpot_ms").split(",")


AIPERF = "source_file=/data/aic-auto-gap-analysis"  # AIConfigurator's collection: AIPerf


def row(id: str, **fields: str) -> dict[str, str]:
    base = {k: "" for k in HEADER}
    base.update(id=id, silicon_data_source=f"{AIPERF}/test; silicon_concurrency=4", backend="sglang",
                backend_version="0.5.1.post1", model_path="Qwen/Qwen3-32B", system="h100_sxm", mode="agg",
                isl="256", osl="16", batch_size="4.0", tp_size="2.0", pp_size="1.0", moe_tp_size="1.0",
                moe_ep_size="1.0", silicon_ttft_ms="100.0", silicon_tpot_ms="10.0")
    base.update(fields)
    return base


DISAGG = dict(mode="disagg", batch_size="", tp_size="", pp_size="", moe_tp_size="", moe_ep_size="")
ROWS = [
    row("ok_bf16"),
    row("fp8", precision="fp8", gemm_quant_mode="fp8", moe_quant_mode="fp8"),
    row("b300", system="b300_sxm"),
    row("trtllm", backend="trtllm", backend_version="1.0.0rc3"),
    row("vllm_b200", backend="vllm", backend_version="0.12.0", system="b200_sxm"),
    row("unknown_model", model_path="acme/Nope-1B"),
    row("minimax", model_path="MiniMaxAI/MiniMax-M2.5"),
    row("disagg_no_workers", **DISAGG),
    row("nvfp4_h100", precision="fp4", gemm_quant_mode="nvfp4"),
    # wide EP (issue 40): a TP8/EP8 prefill, a DP8 attention / EP8 decode
    row("dsr1_wide_ep", **{**DISAGG, "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm",
                           "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block",
                           "prefill_num_workers": "1", "prefill_tp_size": "8", "prefill_moe_tp_size": "1",
                           "prefill_moe_ep_size": "8", "decode_num_workers": "1", "decode_tp_size": "1",
                           "decode_attention_dp_size": "8", "decode_moe_tp_size": "1", "decode_moe_ep_size": "8"}),
    row("dsr1_gaps", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", pp_size="2", tp_size="8",
        moe_tp_size="1", moe_ep_size="4", gemm_quant_mode="fp8_block", moe_quant_mode="fp8_block"),
]
# expressed since issue 39: the operator-table set each runs on (precision picks the set)
EXPRESSED = {"fp8": "h100_sxm_sglang_0.5.14", "b300": "b300_sxm_sglang_0.5.14",
             "trtllm": "h100_sxm_trtllm_1.3.0rc20", "vllm_b200": "b200_sxm_vllm_0.24.0",
             "dsr1_wide_ep": "b200_sxm_sglang_0.5.14"}
EXPECTED = {
    "nvfp4_h100": "no sglang operator tables for h100_sxm with nvfp4 GEMMs (issue 39)",
    "unknown_model": "model acme/Nope-1B not in catalog",
    "minimax": "MoE TP 1 x EP 1 != TP 2 x attention DP 1 GPUs",
    "disagg_no_workers": "disagg row without worker counts",
}


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_statuses_reasons_and_a_finite_prediction(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "pred.csv"
    assert silicon.main(["--rows", str(write_csv(tmp_path / "rows.csv", ROWS)), "--out", str(out), "--aic", "off"]) == 0
    pred = pd.read_csv(out, keep_default_na=False).set_index("id")
    assert list(pred.columns) == ["pdsim_ttft_ms", "pdsim_tpot_ms", "status", "reason"]
    assert list(pred.index) == [r["id"] for r in ROWS]
    ok = pred.loc["ok_bf16"]
    assert ok.status == "ok" and "h100_sxm_sglang_0.5.10" in ok.reason
    assert math.isfinite(float(ok.pdsim_ttft_ms)) and float(ok.pdsim_ttft_ms) > 0
    assert math.isfinite(float(ok.pdsim_tpot_ms)) and float(ok.pdsim_tpot_ms) > 0
    for row_id, tables in EXPRESSED.items():
        assert pred.loc[row_id].status == "ok" and tables in pred.loc[row_id].reason, (row_id, pred.loc[row_id].reason)
    for row_id, reason in EXPECTED.items():
        assert pred.loc[row_id].status == "unsupported", row_id
        assert reason in pred.loc[row_id].reason, (row_id, pred.loc[row_id].reason)
        assert pred.loc[row_id].pdsim_ttft_ms == ""
    gaps = pred.loc["dsr1_gaps"].reason  # every gap named, not only the first
    for gap in ("pipeline parallelism (pp_size=2) not modelled", "MoE TP 1 x EP 4 != TP 8 x attention DP 1 GPUs"):
        assert gap in gaps
    printed = capsys.readouterr().out
    assert "| all | 6 | pdsim | 6 (100%) |" in printed


def test_plans_carry_the_row_shape() -> None:
    catalog = load_catalog()
    plan = plan_row(parse_row(row("ok", batch_size="8.0", silicon_data_source=AIPERF)), catalog)
    assert plan.supported
    assert {"model=qwen3_32b", "hardware=h100", "perf=measured", "cluster.mode=colocated", "cluster.colocated_tp=2",
            "scenario.concurrency=8", "scenario.input.value=256", "scenario.output.value=16"} <= set(plan.overrides)
    disagg = {**DISAGG, "prefill_num_workers": "2", "prefill_tp_size": "4", "decode_num_workers": "1",
              "decode_tp_size": "8", "backend": "vllm"}
    plan = plan_row(parse_row(row("pd", **disagg)), catalog)
    assert plan.supported, plan.missing
    assert {"perf=measured_vllm", "cluster.mode=disaggregated", "cluster.prefill=2", "cluster.decode=1",
            "cluster.prefill_tp=4", "cluster.decode_tp=8", "scenario.concurrency=4"} <= set(plan.overrides)


def test_plans_replay_aiperfs_warmup_and_prompt_pool() -> None:
    # AIConfigurator's aiperf template: 2 C warm-up + 20 C profiled, 100 dataset prompts; the
    # prefix cache is off unless asked, then on where the engine's deployment enables it
    catalog = load_catalog()
    plan = plan_row(parse_row(row("ok", batch_size="8.0", silicon_data_source=AIPERF)), catalog)
    assert {"scenario.num_requests=176", "scenario.warmup_requests=16", "scenario.prefix.prompt_pool=100",
            "scenario.prefix.block_tokens=16", "cluster.prefix_cache=false"} <= set(plan.overrides)
    cached = plan_row(parse_row(row("ok", batch_size="8.0", silicon_data_source=AIPERF)), catalog, "engine")
    assert "cluster.prefix_cache=true" in cached.overrides  # an SGLang row: radix cache on by default
    trt = plan_row(parse_row(row("ok", batch_size="8.0", silicon_data_source=AIPERF, backend="trtllm")), catalog, "engine")
    assert "cluster.prefix_cache=false" in trt.overrides  # the template writes enable_block_reuse: false
    with pytest.raises(ValueError, match="prefix_cache must be 'off' or 'engine', got 'on'"):
        plan_row(parse_row(row("ok", batch_size="8.0", silicon_data_source=AIPERF)), catalog, "on")


@pytest.mark.parametrize(("backend", "mode", "budget", "chunk"), [
    ("sglang", "agg", 256 + 1500, 8192),  # max-prefill-tokens = isl + 1500, default chunk
    ("vllm", "agg", 8 + 256 + 1500, 8 + 256 + 1500),  # max-num-batched-tokens = C + isl + 1500, always chunked
    ("trtllm", "agg", 1792, 0),  # max_num_tokens = C + isl + 1500 = 1764 up to its 32-token block, unchunked
    ("vllm", "disagg", 256 + 1500, 256 + 1500),  # a prefill engine: isl + 1500
])
def test_plans_take_the_engines_token_budget_as_deployed(backend: str, mode: str, budget: int, chunk: int) -> None:
    # AIConfigurator's benchmark rules size one forward's tokens from the row (isl 256, C 8 here)
    fields = dict(batch_size="8.0", silicon_data_source=AIPERF, backend=backend) if mode == "agg" else \
        {**DISAGG, "prefill_num_workers": "1", "prefill_tp_size": "2", "decode_num_workers": "1",
         "decode_tp_size": "2", "backend": backend, "silicon_data_source": f"{AIPERF}; silicon_concurrency=8"}
    plan = plan_row(parse_row(row("b", **fields)), load_catalog())
    assert plan.supported, plan.missing
    assert {f"cluster.max_prefill_tokens={budget}", f"cluster.chunk_size_tokens={chunk}"} <= set(plan.overrides)
    assert "cluster.tokenize_threads=0" in plan.overrides  # Dynamo's frontend: no tokenizer queue


def test_harness_of_the_dev_splits_sources() -> None:
    assert harness_of("source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/a.csv; "
                      "silicon_concurrency=8") == "aiperf"
    for source in ("db-dump/2026-04-27; config_id=733; silicon_concurrency=128; workflow_run_id=758",
                   "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8",
                   "source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=4"):
        assert harness_of(source) == "inferencex", source


IMAX = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=4"


def test_inferencex_rows_replay_bench_serving_and_the_launch_script() -> None:
    # bench_serving: 10 C requests, lengths in [int(0.8 L), L], every request counted; the TRT-LLM
    # Llama-3.1-70B script: max_num_tokens 16384 unchunked, fp8 KV, batch waiting on 1k/1k below TP8
    catalog = load_catalog()
    llama = dict(silicon_data_source=IMAX, backend="trtllm", model_path="meta-llama/Llama-3.1-70B",
                 system="b200_sxm", precision="fp8", gemm_quant_mode="fp8", isl="1024", osl="1024")
    plan = plan_row(parse_row(row("trt", **llama, tp_size="2.0")), catalog)
    assert plan.supported, plan.missing
    assert {"scenario.num_requests=40", "scenario.warmup_requests=0", "scenario.warmup_barrier=true",
            "scenario.input.kind=random", "scenario.input.range_ratio=0.8", "scenario.output.range_ratio=0.8",
            "cluster.max_prefill_tokens=16384", "cluster.chunk_size_tokens=0", "model.kv_dtype=fp8",
            "cluster.batch_wait_iters=20", "cluster.batch_wait_tokens_ratio=0.9"} <= set(plan.overrides)
    keys = [o.split("=", 1)[0] for o in plan.overrides]
    assert len(keys) == len(set(keys))  # the script's values replace the rule-based ones
    for shape in (dict(tp_size="8.0"), dict(tp_size="2.0", isl="8192")):
        assert not any("batch_wait" in o for o in plan_row(parse_row(row("t", **{**llama, **shape})), catalog).overrides)
    aiperf = plan_row(parse_row(row("trt", **{**llama, "silicon_data_source": AIPERF})), catalog, phases="harness")
    assert "scenario.warmup_requests=8" in aiperf.overrides and "cluster.max_prefill_tokens=2528" in aiperf.overrides
    every = plan_row(parse_row(row("trt", **llama)), catalog, phases="aiperf")  # AIPerf's phases for every row
    assert "scenario.warmup_requests=8" in every.overrides
    # each client's prompts cost its own tokenizing time (benchmarks/tokenize_cost.py), whatever the phases
    assert "cluster.tokenize_s_per_token=3.1e-06" in plan.overrides and "cluster.tokenize_s_per_token=3.1e-06" in every.overrides
    assert "cluster.tokenize_s_per_token=1.8e-06" in aiperf.overrides
    # the engine's own server tokenizes on one thread; AIConfigurator's deployments put Dynamo's frontend first
    assert "cluster.tokenize_threads=1" in plan.overrides and "cluster.tokenize_threads=0" in aiperf.overrides


@pytest.mark.parametrize(("clients", "interval"), [(8, 10), (16, 30)])
def test_inferencex_sglang_rows_take_the_scripts_receive_interval(clients: int, interval: int) -> None:
    # dsr1_fp8_b200.sh at TP8: --scheduler-recv-interval 30 if CONC >= 16 else 10, chunked prefill
    # 32768, --max-running-requests 128, fp8 KV
    fields = dict(silicon_data_source=f"db-dump/x; silicon_concurrency={clients}", model_path="deepseek-ai/DeepSeek-V3",
                  system="b200_sxm", precision="fp8", gemm_quant_mode="fp8_block", moe_quant_mode="fp8_block",
                  isl="1024", osl="1024", tp_size="8.0", moe_tp_size="1.0", moe_ep_size="8.0")
    plan = plan_row(parse_row(row("dsr1", **fields)), load_catalog())
    assert plan.supported, plan.missing
    assert {f"cluster.recv_interval_steps={interval}", "cluster.max_prefill_tokens=32768",
            "cluster.chunk_size_tokens=32768", "cluster.max_running_requests=128", "model.kv_dtype=fp8"} <= set(plan.overrides)


def _script(backend: str, model: str, precision: str, date: str, clients: int = 64, isl: int = 1024, tp: int = 8,
            system: str = "b200_sxm", trtllm_moe: str = TRTLLM_MOE_DEFAULT, moe_ep: int = 0) -> set[str]:
    """An aggregated InferenceX row's overrides; moe_ep 0: EP over the TP GPUs, 1: MoE TP."""
    src = f"db-dump/x; silicon_concurrency={clients}; measured={date}T00:00:00.000Z"
    quant = {"fp8": "fp8_block", "fp4": "nvfp4"}.get(precision, precision)
    ep = moe_ep or tp
    fields = dict(silicon_data_source=src, backend=backend, model_path=model, system=system, precision=precision,
                  gemm_quant_mode=quant, moe_quant_mode=quant, isl=str(isl), osl="1024", tp_size=f"{tp}.0",
                  moe_tp_size=f"{tp // ep}.0", moe_ep_size=f"{ep}.0")
    return set(plan_row(parse_row(row("r", **fields)), load_catalog(), trtllm_moe=trtllm_moe).overrides)


def test_trtllm_deepseek_script_versions_by_date() -> None:
    # dsr1_fp8_b200_trt.sh: max_num_tokens = C + isl + 64 up to 64 (1152 at 64 clients), at least
    # 8192 from 2026-01-21; batch waiting 40 / 0.8 on 1k/1k from 64 clients from 2026-01-29
    early = _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2025-12-20")
    assert {"cluster.max_prefill_tokens=1152", "cluster.chunk_size_tokens=0", "model.kv_dtype=fp8"} <= early
    assert not any("batch_wait" in o for o in early)
    mid = _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-01-25")
    assert "cluster.max_prefill_tokens=8192" in mid and not any("batch_wait" in o for o in mid)
    late = _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05")
    assert {"cluster.batch_wait_iters=40", "cluster.batch_wait_tokens_ratio=0.8"} <= late
    assert not any("batch_wait" in o for o in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05", 32))
    assert "cluster.max_prefill_tokens=8512" in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp4", "2026-02-05",
                                                        256, isl=8192)


def _mtp_row(image: str, backend: str = "trtllm", precision: str = "fp8", clients: int = 32, tp: int = 8,
             dp: int = 1, model: str = "deepseek-ai/DeepSeek-R1") -> dict[str, str]:
    src = f"source_file=2026-04-06.csv; silicon_concurrency={clients}; measured=2026-02-05T00:00:00.000Z; image={image}"
    quant = {"fp8": "fp8_block", "fp4": "nvfp4"}[precision]
    return row("m", silicon_data_source=src, backend=backend, model_path=model, system="b200_sxm",
               precision=precision, gemm_quant_mode=quant, moe_quant_mode=quant, isl="1024", osl="1024",
               tp_size=f"{tp}.0", attention_dp_size=f"{dp}.0", moe_tp_size="1.0", moe_ep_size="8.0")


def test_trtllm_deepseek_mtp_runs_are_told_by_their_image() -> None:
    """dsr1-fp{4,8}-b200-trt-mtp ran release 1.2.0rc6.post3, the plain configs post2: MTP 3, 1 under
    attention DP; max_num_tokens = (MTP + 1) x max_batch_size + isl + 64 up to 64; no batch waiting."""
    post3, post2 = "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6.post3", "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post2"
    mtp = parse_row(_mtp_row(post3.replace("/nvidia", "#nvidia")))
    assert mtp.mtp_draft_tokens == 3
    plan = set(plan_row(mtp, load_catalog()).overrides)
    assert {"perf.mtp_draft_tokens=3", "cluster.max_prefill_tokens=1216", "cluster.chunk_size_tokens=0",
            "model.kv_dtype=fp8", "cluster.batch_wait_iters=0"} <= plan  # (3 + 1) x 32 + 1024 + 64 = 1216
    assert parse_row(_mtp_row(post3, dp=8, tp=1, clients=256)).mtp_draft_tokens == 1
    fp4_dp = plan_row(parse_row(_mtp_row(post3, precision="fp4", dp=8, tp=1, clients=256)), load_catalog())
    assert "cluster.max_prefill_tokens=1216" in fp4_dp.overrides  # 2 x 256 / 4 + 1024 + 64 = 1216
    fp8_dp = plan_row(parse_row(_mtp_row(post3, dp=8, tp=1, clients=256)), load_catalog())
    assert "cluster.max_prefill_tokens=1152" in fp8_dp.overrides  # 2 x 256 / 8 + 1024 + 64 = 1152
    for other in (_mtp_row(post2), _mtp_row(post3, backend="sglang"), _mtp_row(post3, model="Qwen/Qwen3-32B")):
        assert parse_row(other).mtp_draft_tokens == 0
    assert not any(o.startswith("perf.mtp") for o in plan_row(parse_row(_mtp_row(post2)), load_catalog()).overrides)


def test_trtllm_attention_dp_rows_take_the_scripts_balance() -> None:
    """dsr1_fp{4,8}_b200_trt{,_mtp}.sh under attention DP: enable_balance, timeout_iters 60,
    batching_wait_iters 0; gptoss_fp4_b200_trt.sh: enable_balance with TensorRT-LLM's defaults (50,
    10); none without attention DP or on another engine. The MTP script's max_batch_size (256 / 8 =
    32 per rank for fp8) is the ranks' slot count the balance reads."""
    post3 = "nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post3"
    balance = {"cluster.adp_balance=true", "cluster.adp_timeout_iters=60", "cluster.adp_batching_wait_iters=0"}
    mtp_dp = set(plan_row(parse_row(_mtp_row(post3, dp=8, tp=1, clients=256)), load_catalog()).overrides)
    assert balance | {"cluster.max_running_requests=32"} <= mtp_dp
    plain_dp = set(plan_row(parse_row(_mtp_row("nvcr.io#nvidia/tensorrt-llm/release:1.2.0rc6.post2", dp=8, tp=1,
                                                clients=256)), load_catalog()).overrides)
    assert balance <= plain_dp
    oss_row = {**_mtp_row("x", dp=4, tp=1, clients=64, model="openai/gpt-oss-120b", precision="fp4"),
               "moe_tp_size": "2.0", "moe_ep_size": "2.0"}  # (as the dev rows record TP2 EP2 with attention DP)
    oss_plan = plan_row(parse_row(oss_row), load_catalog())
    assert not oss_plan.missing, oss_plan.missing
    oss = set(oss_plan.overrides)
    assert {"cluster.adp_balance=true", "cluster.adp_timeout_iters=50", "cluster.adp_batching_wait_iters=10"} <= oss
    for other in (_mtp_row(post3), _mtp_row(post3, backend="sglang", dp=8, tp=1)):
        assert not any("adp_" in o for o in plan_row(parse_row(other), load_catalog()).overrides)


def test_vllm_and_sglang_script_versions_by_date_and_system() -> None:
    minimax = "MiniMaxAI/MiniMax-M2.5"
    before = _script("vllm", minimax, "fp8", "2026-03-20", tp=4)  # vLLM's default budget, KV as the checkpoint
    assert "cluster.max_prefill_tokens=8192" in before and "model.kv_dtype=fp8" not in before
    after = _script("vllm", minimax, "fp8", "2026-04-10", isl=8192, tp=4)  # --max-num-batched-tokens $((ISL*2))
    assert {"cluster.max_prefill_tokens=16384", "cluster.chunk_size_tokens=16384", "model.kv_dtype=fp8"} <= after
    assert "cluster.colocated_moe_ep=4" in after  # minimaxm2.5_fp8_b200.sh passes --enable-expert-parallel
    kimi = "moonshotai/Kimi-K2.5"  # no Kimi script of the window passes it: the row's EP 4 ran TP4
    for date in ("2026-03-27", "2026-04-21"):
        layout = _script("vllm", kimi, "fp4", date, tp=4)
        assert "cluster.colocated_moe_ep=1" in layout and "cluster.colocated_moe_ep=4" not in layout
    qwen = "Qwen/Qwen3.5-397B-A17B"
    qwen_b200 = _script("sglang", qwen, "fp8", "2026-03-10", 16, tp=4)  # --tokenizer-worker-num 6
    assert {"cluster.max_prefill_tokens=32768", "cluster.recv_interval_steps=30", "cluster.tokenize_threads=6"} <= qwen_b200
    assert "cluster.tokenize_threads=1" not in qwen_b200  # the script's six replace the engine's one
    b300 = _script("sglang", qwen, "fp8", "2026-04-17", 16, tp=4, system="b300_sxm")  # its own recipe
    assert {"cluster.max_prefill_tokens=16384", "cluster.recv_interval_steps=10", "cluster.tokenize_threads=6"} <= b300
    assert "cluster.tokenize_threads=1" in _script("sglang", "deepseek-ai/DeepSeek-R1", "fp8", "2026-03-10", 16)


def test_suspect_rows_are_flagged_not_dropped() -> None:
    df = pd.DataFrame([row(f"c{c}", batch_size=f"{c}.0", silicon_tpot_ms=str(t))
                       for c, t in ((4, 10.0), (8, 400.0), (16, 12.0))])
    df["concurrency"] = [4, 8, 16]
    for col in ("silicon_ttft_ms", "silicon_tpot_ms"):
        df[col] = df[col].astype(float)
    flags = silicon_errors.suspect_rows(df)
    assert flags.tolist()[0] == "" and flags.tolist()[2] == ""
    assert flags.tolist()[1].startswith("TPOT 400 ms")


def test_every_dev_row_gets_a_status(data_dir: Path) -> None:
    path = data_dir / "silicon" / "silicon_dev.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    catalog = load_catalog()
    plans = [plan_row(parse_row(r), catalog) for r in silicon.read_rows(path)]
    supported = [p for p in plans if p.supported]
    assert len(plans) == 3627 and len(supported) > 100
    assert all(p.missing for p in plans if not p.supported)


@pytest.mark.parametrize(("backend", "layout", "expected"), [
    ("sglang", ("64.0", "1.0", "8.0", "8.0"), (8, 1, 8)),  # TP8 EP8 recorded on 64 GPUs
    ("trtllm", ("1.0", "64.0", "8.0", "8.0"), (1, 8, 8)),  # TP8 EP8 with attention DP
    ("vllm", ("4.0", "4.0", "1.0", "16.0"), (4, 1, 4)),  # TP4 with --enable-expert-parallel
    ("trtllm", ("1.0", "8.0", "1.0", "8.0"), (1, 8, 8)),  # recorded as run: unchanged
])
def test_inferencex_agg_rows_run_on_one_node_as_the_scripts_deploy_them(
        backend: str, layout: tuple[str, ...], expected: tuple[int, int, int]) -> None:
    tp, dp, moe_tp, moe_ep = layout
    fields = dict(silicon_data_source="db-dump/x; silicon_concurrency=64; measured=2026-02-01T00:00:00.000Z",
                  backend=backend, model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp4",
                  gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", isl="1024", osl="1024", tp_size=tp,
                  attention_dp_size=dp, moe_tp_size=moe_tp, moe_ep_size=moe_ep)
    overrides = set(plan_row(parse_row(row("r", **fields)), load_catalog()).overrides)
    want_tp, want_dp, want_ep = expected
    assert {f"cluster.colocated_tp={want_tp}", f"cluster.colocated_dp={want_dp}",
            f"cluster.colocated_moe_ep={want_ep}"} <= overrides
    aiperf = parse_row(row("a", **{**fields, "silicon_data_source": AIPERF}))  # AIConfigurator's own rows as written
    assert aiperf.agg is not None and (aiperf.agg.tp, aiperf.agg.attention_dp) == (float(tp), float(dp))


@pytest.mark.parametrize(("system", "precision", "backend", "prefill", "decode"), [
    ("gb300", "fp8", "sglang", "deepep", "deepep"), ("gb300", "fp4", "sglang", "allgather", "deepep"),
    ("b200_sxm", "fp8", "sglang", "allgather", "allgather"), ("b200_sxm", "fp4", "sglang", "allgather", "allgather"),
    ("gb300", "fp8", "trtllm", "allgather", "allgather")])
def test_wide_ep_rows_reach_their_experts_as_deployed(system: str, precision: str, backend: str, prefill: str,
                                                      decode: str) -> None:
    """Per side, as srt-slurm's recipes set --moe-a2a-backend: GB300 fp8 DeepEP on both sides, GB300
    fp4 on its decode only, B200 on neither; TRT-LLM all-gathers."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    gemm = "fp8_block" if precision == "fp8" else "nvfp4"
    raw = {**wide, "system": system, "precision": precision, "backend": backend, "gemm_quant_mode": gemm,
           "moe_quant_mode": gemm, "backend_version": "1.0.0rc3" if backend == "trtllm" else wide["backend_version"]}
    plan = plan_row(parse_row(raw), load_catalog())
    assert plan.supported, plan.missing
    assert {f"cluster.prefill_moe_a2a={prefill}", f"cluster.decode_moe_a2a={decode}"} <= set(plan.overrides)
    assert not any(o.startswith("perf.moe_a2a=") for o in plan.overrides)  # one place decides: the side


def test_moe_tables_are_read_at_skewed_routing_where_the_set_has_it() -> None:
    from silicon_engines import MOE_ROUTING, moe_routing

    assert moe_routing("b200_sxm_sglang_0.5.14") == MOE_ROUTING == "power_law_1.01"
    assert moe_routing("h100_sxm_sglang_0.5.10") == "balanced"  # the older sets measured nothing else
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    assert "perf.moe_distribution=power_law_1.01" in plan_row(parse_row(wide), load_catalog()).overrides


@pytest.mark.parametrize(("backend", "version", "per_layer_s", "graph_tokens", "graph_s"),
                         [("sglang", "0.5.10", 0.003, 0, 0.0), ("trtllm", "1.0.0rc3", 0.00075, 0, 0.0),
                          ("vllm", "0.14.0", 0.0005, 512, 0.00025)])
def test_prefill_host_time_per_engine(backend: str, version: str, per_layer_s: float, graph_tokens: int,
                                      graph_s: float) -> None:
    """Every engine's host time adds to a prompt step's forward. SGLang and TRT-LLM run every prompt
    step eagerly; vLLM replays graphs up to its capture size (512 by default) at a lower host time."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    raw = {**wide, "backend": backend, "backend_version": version}
    plan = plan_row(parse_row(raw), load_catalog())
    assert plan.supported, plan.missing
    assert {"perf.prefill_host_mode=serial", f"perf.prefill_host_s_per_moe_layer={per_layer_s}",
            f"perf.prefill_graph_max_tokens={graph_tokens}",
            f"perf.prefill_graph_host_s_per_moe_layer={graph_s}"} <= set(plan.overrides)


@pytest.mark.parametrize(("system", "precision", "backend", "isl", "prefill_workers", "budget", "chunk"), [
    # per DP rank (StepLimits scales by the ranks); SGLang divides the chunk by the DP size (4 here).
    # B200 SGLang recipes: 32768 / 32768 (65536 / 65536 on the fp4 8k/1k 7-prefill point)
    ("b200_sxm", "fp4", "sglang", "1024", "1", 32768 // 4, 32768 // 4),
    ("b200_sxm", "fp4", "sglang", "8192", "7", 65536 // 4, 65536 // 4),
    # GB300 fp4 DP4 prefills: min(max-prefill-tokens 32768, chunked-prefill-size 65536 / 4)
    ("gb300", "fp4", "sglang", "1024", "4", 16384, 16384),
    # TRT-LLM context ranks: min(max_num_tokens, max_batch_size x isl), unchunked
    ("b200_sxm", "fp4", "trtllm", "1024", "1", min(10240, 8 * 1024), 0),
    ("b200_sxm", "fp8", "trtllm", "8192", "1", min(8320, 1 * 8192), 0),
])
def test_disaggregated_rows_take_their_recipes_prefill_budget(system: str, precision: str, backend: str, isl: str,
                                                              prefill_workers: str, budget: int, chunk: int) -> None:
    """srt-slurm's recipes set each prefill DP rank's budget (silicon_recipes)."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    gemm = "fp8_block" if precision == "fp8" else "nvfp4"
    raw = {**wide, "system": system, "precision": precision, "backend": backend, "gemm_quant_mode": gemm,
           "moe_quant_mode": gemm, "isl": isl, "prefill_num_workers": prefill_workers, "prefill_tp_size": "1",
           "prefill_attention_dp_size": "4", "prefill_moe_ep_size": "4",
           "backend_version": "1.0.0rc3" if backend == "trtllm" else wide["backend_version"]}
    plan = plan_row(parse_row(raw), load_catalog())
    assert plan.supported, plan.missing
    assert {f"cluster.max_prefill_tokens={budget}", f"cluster.chunk_size_tokens={chunk}"} <= set(plan.overrides)


@pytest.mark.parametrize(("backend", "prefill_dp", "dispatch"), [
    ("sglang", "4", "bootstrap_room"), ("sglang", "1", None), ("trtllm", "4", None)])
def test_sglang_prefill_dp_ranks_follow_the_bootstrap_room(backend: str, prefill_dp: str, dispatch: str | None) -> None:
    """SGLang's prefill DP controller sends a request to rank bootstrap_room % dp; TRT-LLM's
    context servers and a TP prefill keep the balanced spread (the default)."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    raw = {**wide, "backend": backend, "prefill_tp_size": "1" if prefill_dp != "1" else "4",
           "prefill_attention_dp_size": prefill_dp, "prefill_moe_ep_size": "4",
           "backend_version": "1.0.0rc3" if backend == "trtllm" else wide["backend_version"]}
    plan = plan_row(parse_row(raw), load_catalog())
    assert plan.supported, plan.missing
    got = [o.split("=", 1)[1] for o in plan.overrides if o.startswith("cluster.prefill_dp_dispatch=")]
    assert got == ([dispatch] if dispatch else [])


@pytest.mark.parametrize(("backend", "system", "mode", "kv"), [
    ("sglang", "b200_sxm", "disagg", "fp8"), ("sglang", "gb300", "disagg", "fp8"),
    ("sglang", "h100_sxm", "disagg", "bf16"), ("trtllm", "b200_sxm", "disagg", "fp8")])
def test_a_disaggregated_row_takes_its_recipes_kv_cache_dtype(backend: str, system: str, mode: str, kv: str) -> None:
    """SGLang's B200 and GB300 recipes run an fp8 KV cache on both sides (--kv-cache-dtype
    fp8_e4m3) where SGLang's own default is bf16; the H100 recipes set none; TRT-LLM's default
    is fp8 already."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    raw = {**wide, "backend": backend, "system": system, "mode": mode,
           "backend_version": "1.0.0rc3" if backend == "trtllm" else wide["backend_version"]}
    plan = plan_row(parse_row(raw), load_catalog())
    assert plan.supported, plan.missing
    assert [o for o in plan.overrides if o.startswith("model.kv_dtype=")] == [f"model.kv_dtype={kv}"]


@pytest.mark.parametrize(("system", "isl", "decode_dp", "sides"), [
    ("b200_sxm", 8192, 1, ("prefill", "decode")), ("b200_sxm", 1024, 1, ("decode",)), ("b200_sxm", 1024, 8, ()),
    ("gb300", 8192, 1, ("decode",)), ("gb300", 1024, 8, ()), ("b300_sxm", 1024, 8, ("prefill", "decode"))])
def test_trtllm_fp8_sides_on_the_trtllm_gen_moe_read_the_sglang_set(system: str, isl: int, decode_dp: int,
                                                                   sides: tuple[str, ...]) -> None:
    """The fp8 recipes' moe_config.backend per side: TRTLLM (trtllm-gen, timed in the SGLang set of
    the GPU) or DEEPGEMM (the TRT-LLM set's own rows, nothing to override); fp4 keeps its set."""
    from silicon_parse import Side
    from silicon_recipes import trtllm_moe_table_overrides

    prefill = Side(tp=1, attention_dp=8, moe_ep=8, workers=1)
    decode = Side(tp=8 // decode_dp, attention_dp=decode_dp, moe_ep=8, workers=1)
    assert trtllm_moe_table_overrides(system, "fp8", isl, prefill, decode) == [
        f"cluster.{side}_moe_table_set={system}_sglang_0.5.14" for side in sides]
    assert trtllm_moe_table_overrides(system, "fp4", isl, prefill, decode) == []


@pytest.mark.parametrize(("prefill_ep", "decode_ep", "sides"), [
    (1, 1, ("prefill", "decode")), (8, 1, ("decode",)), (1, 8, ("prefill",)), (8, 8, ())])
def test_recipe_tp_reads_trtllm_gen_only_on_sides_without_expert_parallelism(
        prefill_ep: int, decode_ep: int, sides: tuple[str, ...]) -> None:
    """The default source (recipe_tp) takes SGLang's timing of the trtllm-gen kernels where SGLang
    calls them as TRT-LLM does (MoE TP, no EP); a side under EP keeps DeepGEMM's rows; tables
    never reads them."""
    from silicon_parse import Side
    from silicon_recipes import trtllm_moe_table_overrides

    prefill = Side(tp=1, attention_dp=8, moe_ep=prefill_ep, workers=1)
    decode = Side(tp=8, attention_dp=1, moe_ep=decode_ep, workers=1)  # B200 8k: TRTLLM on both sides
    assert TRTLLM_MOE_DEFAULT == "recipe_tp"
    assert trtllm_moe_table_overrides("b200_sxm", "fp8", 8192, prefill, decode, "recipe_tp") == [
        f"cluster.{side}_moe_table_set=b200_sxm_sglang_0.5.14" for side in sides]
    assert trtllm_moe_table_overrides("b200_sxm", "fp8", 8192, prefill, decode, "tables") == []
    assert len(trtllm_moe_table_overrides("b200_sxm", "fp8", 8192, prefill, decode, "recipe")) == 2


def test_a_trtllm_fp8_disagg_row_gets_its_sides_moe_tables() -> None:
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]  # B200 fp8: TP8/EP8 prefill, DP8 decode
    raw = {**wide, "backend": "trtllm", "backend_version": "1.0.0rc3", "precision": "fp8", "isl": "8192"}
    plan = plan_row(parse_row(raw), load_catalog(), trtllm_moe="recipe")
    assert plan.supported, plan.missing
    assert [o for o in plan.overrides if "_moe_table_set=" in o] == [
        "cluster.prefill_moe_table_set=b200_sxm_sglang_0.5.14", "cluster.decode_moe_table_set=b200_sxm_sglang_0.5.14"]
    for source in ("tables", "recipe_tp"):  # its own rows: tables always, the default under EP
        plan = plan_row(parse_row(raw), load_catalog(), trtllm_moe=source)
        assert not any("_moe_table_set=" in o for o in plan.overrides), source


def test_trtllm_fp8_script_runs_trtllm_gen_moe_from_2026_01_29() -> None:
    """dsr1_fp8_b200_trt.sh: DEEPGEMM until 2026-01-29 (#594), then TRTLLM but DEEPGEMM at 1k/8k
    from 256 clients."""
    moe = "cluster.colocated_moe_table_set=b200_sxm_sglang_0.5.14"
    assert moe not in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-01-25", trtllm_moe="recipe")
    assert moe in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05", trtllm_moe="recipe")
    assert moe not in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp4", "2026-02-05", trtllm_moe="recipe")
    assert moe not in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05", trtllm_moe="tables")
    # the default (recipe_tp): the script's kernel at MoE TP8, DeepGEMM's rows under EP8
    assert moe in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05", moe_ep=1)
    assert moe not in _script("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05")
    from silicon_harness import deployment_for

    late = deployment_for("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "b200_sxm", 8, "2026-02-05")
    assert late is not None
    assert late.runs_trtllm_gen_moe(1024, 8192, 128) and not late.runs_trtllm_gen_moe(1024, 8192, 256)
    assert late.runs_trtllm_gen_moe(8192, 1024, 256)


def test_a_system_without_recipes_keeps_the_rules_budget() -> None:
    from silicon_parse import Side
    from silicon_recipes import prefill_overrides

    side = Side(tp=8, attention_dp=1, workers=1)
    assert prefill_overrides("sglang", "a100_sxm", "fp8", 1024, side, side) == []
    assert prefill_overrides("vllm", "b200_sxm", "fp8", 1024, side, side) == []
    # GB300 fp8 low-latency TP prefill, 8k prompts: the recipe's 32768 (no DP: x1)
    assert prefill_overrides("sglang", "gb300", "fp8", 8192, side, side) == [
        "cluster.max_prefill_tokens=32768", "cluster.chunk_size_tokens=32768"]


def test_trtllm_generation_slots_come_from_the_recipe_run_at_that_concurrency() -> None:
    """GB300 fp8 1k/1k, 4 generation servers of TEP8: batch 1 at 4 clients, 4 at 24, 16 at 84 (so
    24 clients meet 16 slots); a point no recipe ran keeps the rules' running limit."""
    [wide] = [r for r in ROWS if r["id"] == "dsr1_wide_ep"]
    base = {**wide, "system": "gb300", "backend": "trtllm", "backend_version": "1.0.0rc3", "precision": "fp8",
            "isl": "1024", "osl": "1024", "gemm_quant_mode": "fp8_block",
            "moe_quant_mode": "fp8_block", "prefill_num_workers": "1", "prefill_tp_size": "1",
            "prefill_attention_dp_size": "4", "prefill_moe_ep_size": "4", "decode_num_workers": "4",
            "decode_tp_size": "8", "decode_attention_dp_size": "1", "decode_moe_tp_size": "1", "decode_moe_ep_size": "8"}
    for clients, running in ((4, 1), (24, 4), (84, 16), (50, 256)):
        source = f"db-dump/x; silicon_concurrency={clients}; measured=2026-02-07T00:00:00.000Z"
        plan = plan_row(parse_row({**base, "silicon_data_source": source}), load_catalog())
        assert plan.supported, plan.missing
        assert f"cluster.max_running_requests={running}" in plan.overrides


def test_error_tables_give_each_mode_its_own_line() -> None:
    """Issue 40's bar holds in each mode: the table has `mode agg` / `mode disagg` lines with their
    own medians (hand-computed: agg APEs 10% and 30%, disagg 50%)."""
    df = pd.DataFrame({"mode": ["agg", "agg", "disagg"], "suspect": ["", "", ""],
                       "silicon_ttft_ms": [100.0, 100.0, 100.0], "silicon_tpot_ms": [10.0, 10.0, 10.0],
                       "pdsim_ttft_ms": [110.0, 70.0, 150.0], "pdsim_tpot_ms": [10.0, 11.0, 10.0],
                       "pdsim_ok": [True, True, True]})
    table = {line[0]: line for line in silicon_errors.error_table(df, {"pdsim": "pdsim"}, by_group=False)}
    assert list(table) == ["all", "mode agg", "mode disagg"]
    assert table["mode agg"][1:5] == ["2", "pdsim", "2 (100%)", "20.0"]  # median of 10% and 30%
    assert table["mode agg"][8] == "5.0"  # TPOT: median of 0% and 10%
    assert table["mode disagg"][4] == "50.0" and table["all"][4] == "30.0"
    one_mode = silicon_errors.error_table(df[df["mode"] == "agg"], {"pdsim": "pdsim"}, by_group=False)
    assert [line[0] for line in one_mode] == ["all"]


def test_vllm_gpt_oss_runs_the_scripts_mxfp8_moe_kernel_from_a_set_that_measured_it() -> None:
    """gptoss_fp4_b200.sh exports VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: the experts run MXFP4 x
    MXFP8, which vLLM's B200 set never measured, so the row reads SGLang's B200 rows of the kernel;
    TRT-LLM's rows keep their own set (it measured the kernel)."""
    vllm = _script("vllm", "openai/gpt-oss-120b", "fp4", "2026-02-25", clients=8, tp=2)
    assert {"model.moe_quant=w4a8_mxfp4_mxfp8", "perf.moe_table_set=b200_sxm_sglang_0.5.14"} <= vllm
    assert "model.moe_quant=w4a16_mxfp4" not in vllm
    trt = _script("trtllm", "openai/gpt-oss-120b", "fp4", "2026-02-05", clients=8, tp=2)
    assert "model.moe_quant=w4a8_mxfp4_mxfp8" in trt and not any(o.startswith("perf.moe_table_set") for o in trt)


def test_vllm_prompt_steps_replay_graphs_up_to_the_scripts_capture_size() -> None:
    """vLLM replays piecewise CUDA graphs for steps of up to max-cudagraph-capture-size tokens:
    its default 512 unless the script sets 2048 (MiniMax fp8 from 2026-04-03, MiniMax fp4 from
    2026-04-08, Kimi fp4 B200 from 2026-04-20); SGLang and TRT-LLM run every prompt step eagerly."""
    minimax, kimi = "MiniMaxAI/MiniMax-M2.5", "moonshotai/Kimi-K2.5"
    for backend, model, precision, date, system, tokens in [
            ("vllm", minimax, "fp8", "2026-03-28", "b200_sxm", 512), ("vllm", minimax, "fp8", "2026-04-03", "b200_sxm", 2048),
            ("vllm", minimax, "fp4", "2026-04-03", "b200_sxm", 512), ("vllm", minimax, "fp4", "2026-04-22", "b200_sxm", 2048),
            ("vllm", minimax, "fp4", "2026-04-21", "b300_sxm", 2048), ("vllm", kimi, "fp4", "2026-03-27", "b200_sxm", 512),
            ("vllm", kimi, "fp4", "2026-04-20", "b200_sxm", 2048), ("vllm", kimi, "fp4", "2026-04-20", "b300_sxm", 512),
            ("sglang", "Qwen/Qwen3.5-397B-A17B", "fp8", "2026-03-10", "b200_sxm", 0),
            ("trtllm", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05", "b200_sxm", 0)]:
        plan = _script(backend, model, precision, date, 4, tp=4, system=system)
        graphs = {o for o in plan if o.startswith("perf.prefill_graph_max_tokens=")}
        assert graphs == {f"perf.prefill_graph_max_tokens={tokens}"}, (model, precision, date, system)
    nightly = _script("vllm", minimax, "fp4", "2026-04-03", 4, tp=4)  # the 2026-04-02 nightly script
    assert {"cluster.max_prefill_tokens=8192", "model.kv_dtype=fp8"} <= nightly


def _vllm_minimax(version: str, system: str = "b200_sxm", precision: str = "fp8", date: str = "") -> set[str]:
    quant = {"fp8": "fp8_block", "fp4": "nvfp4"}[precision]
    fields = dict(backend="vllm", backend_version=version, model_path="MiniMaxAI/MiniMax-M2.5", system=system,
                  precision=precision, gemm_quant_mode=quant, moe_quant_mode=quant, tp_size="2.0",
                  moe_tp_size="2.0", moe_ep_size="1.0")
    if date:
        fields["silicon_data_source"] = f"db-dump/x; silicon_concurrency=64; measured={date}T00:00:00.000Z"
    return set(plan_row(parse_row(row("r", **fields)), load_catalog()).overrides)


def test_vllm_releases_before_024_price_small_moe_layers_with_triton() -> None:
    """vLLM before 0.24 runs block-fp8 experts in Triton below DeepGEMM's 128-token alignment: its
    B200 and B300 rows (0.17, 0.19, a nightly measured before 0.24.0's release on 2026-07-01; fp8
    and fp4 alike, the table holds block fp8 only) read the set's moe_triton table below 128
    tokens. 0.24, a nightly of unknown date or measured from that date on, H100 rows (no Triton
    table there) and other engines do not."""
    fallback = {"perf.moe_fallback_table=moe_triton", "perf.moe_fallback_below_tokens=128"}
    for version, precision, system in (("0.17.0", "fp8", "b200_sxm"), ("0.19.0", "fp8", "b200_sxm"),
                                       ("0.19.0", "fp4", "b200_sxm"), ("0.19.0", "fp8", "b300_sxm")):
        assert fallback <= _vllm_minimax(version, precision=precision, system=system)
    assert fallback <= _vllm_minimax("nightly-5b8c30d62b754b57", system="b300_sxm", date="2026-04-21")
    for plan in (_vllm_minimax("0.24.0"), _vllm_minimax("nightly-5b8c30d62b754b57"),
                 _vllm_minimax("nightly-5b8c30d62b754b57", date="2026-07-01"),
                 _vllm_minimax("0.18.0", system="h100_sxm"),
                 _script("sglang", "deepseek-ai/DeepSeek-R1", "fp8", "2026-02-05")):
        assert not any(o.startswith("perf.moe_fallback") for o in plan)


def test_minimax_fp8_b200_runs_triton_at_every_size_while_its_script_turned_deepgemm_off() -> None:
    """minimaxm2.5_fp8_b200.sh exported VLLM_MOE_USE_DEEP_GEMM=0 from 2026-03-04 (VLLM_USE_DEEP_GEMM=0
    from 2026-03-27) until 2026-04-01: its rows of 2026-03-11 and 2026-03-28 read the Triton table
    at every size; the rows from 2026-04-03 fall back below 128 tokens only, as does a row before
    2026-03-04."""
    def below(date: str) -> set[str]:
        return {o for o in _vllm_minimax("0.17.0", date=date) if o.startswith("perf.moe_fallback_below_tokens")}
    every = {f"perf.moe_fallback_below_tokens={1 << 30}"}
    assert below("2026-03-11") == below("2026-03-28") == every
    assert below("2026-04-03") == below("2026-02-25") == {"perf.moe_fallback_below_tokens=128"}
    assert "perf.moe_fallback_table=moe_triton" in _vllm_minimax("0.17.0", date="2026-03-11")


def test_a_measurement_listed_twice_counts_once_in_its_own_lines() -> None:
    """The dump lists some runs twice (another config id or version label, metrics rounded): the
    second copy of a run repeats it when layout, concurrency and both metrics (3 significant
    digits) agree; another concurrency or a different TPOT is another measurement. Hand-computed
    medians: all rows 10% (APEs 0, 10, 10, 30), each measurement once 10% (0, 10, 30)."""
    base = {"model_path": "m", "system": "b200_sxm", "backend": "sglang", "mode": "agg", "precision": "fp8",
            "isl": 1024, "osl": 1024, "tp_size": "8.0", "suspect": "", "pdsim_ok": True, "concurrency": 4}
    df = pd.DataFrame([
        {**base, "silicon_ttft_ms": 231.847882, "silicon_tpot_ms": 8.065206, "pdsim_ttft_ms": 231.847882, "pdsim_tpot_ms": 8.87},
        {**base, "silicon_ttft_ms": 231.85, "silicon_tpot_ms": 8.07, "pdsim_ttft_ms": 231.85, "pdsim_tpot_ms": 8.877},
        {**base, "concurrency": 8, "silicon_ttft_ms": 231.85, "silicon_tpot_ms": 8.07, "pdsim_ttft_ms": 231.85,
         "pdsim_tpot_ms": 8.07},
        {**base, "silicon_ttft_ms": 231.85, "silicon_tpot_ms": 9.5, "pdsim_ttft_ms": 231.85, "pdsim_tpot_ms": 12.35},
    ])
    assert silicon_errors.repeated_rows(df).tolist() == [False, True, False, False]
    table = {line[0]: line for line in silicon_errors.error_table(df, {"pdsim": "pdsim"}, by_group=False)}
    assert list(table) == ["all", "each measurement once (3)"]
    assert table["all"][8] == "10.0" and table["each measurement once (3)"][8] == "10.0"
    assert table["each measurement once (3)"][1] == "3"
