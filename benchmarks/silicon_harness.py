"""Which benchmark client measured a silicon row, and how pdsim replays that client's run.

Two harnesses took the development split's rows (`harness_of`, from `silicon_data_source`):

- **aiperf**: AIConfigurator's own collection ("aic-auto-gap-analysis" sources): NVIDIA AIPerf
  behind AIConfigurator's generated deployments; silicon_rows.workload_overrides replays it
  (2 C warm-up requests, a barrier, 20 C profiled, a 100-prompt pool).
- **inferencex**: every other source (the InferenceX database dump's workflow runs, its exported
  CSVs and the gap analyses of them: the 1k/1k, 1k/8k and 8k/1k grid at 4-256 clients).
  InferenceX's client is `utils/bench_serving/benchmark_serving.py`, run by its
  `benchmarks/*.sh` launch scripts (SemiAnalysisAI/InferenceX, Apache-2.0) as
  `--dataset-name random --random-range-ratio 0.8 --num-prompts 10 C --max-concurrency C
  --request-rate inf --ignore-eos`: input and output lengths drawn apart, uniform integers in
  [int(0.8 L), L]; prompts of random tokens (nothing shared); all 10 C requests queued at once
  behind a C-slot semaphore (a closed loop whose first C leave together); its warm-up (none, or
  2 C copies of one prompt in later versions) ends before the run starts; statistics over every
  request of the run. AIConfigurator's import of InferenceX results reads their `mean_ttft` and
  `mean_tpot`, which is what the rows hold.

InferenceX deploys each (engine, model) with its own launch script; `INFERENCEX_DEPLOYMENTS`
holds the ones read so far (the script named in each entry). A row without an entry keeps
AIConfigurator's rule-based deployment (silicon_rows.budget_overrides).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HARNESSES = ("aiperf", "inferencex")
INFERENCEX_RANGE_RATIO, INFERENCEX_PROMPTS_PER_CLIENT = 0.8, 10
# Both clients send text, which the engine's frontend tokenizes before scheduling
# (cluster.tokenize_s_per_token): seconds a prompt token for each client's prompts, from
# benchmarks/tokenize_cost.py (SmolLM2's byte-level BPE on this project's 2-core AMD EPYC
# machine, 2026-11-30, 5 runs of 15 prompts: 2.95 / 3.24 us at 1k / 8k tokens for InferenceX's
# prompts, decoded runs of consecutive token ids; 1.69 / 1.88 us for AIPerf's corpus text)
TOKENIZE_S_PER_TOKEN = {"inferencex": 3.1e-6, "aiperf": 1.8e-6}


def tokenizer_overrides(harness: str, aggregated: bool) -> list[str]:
    """The frontend that tokenized a row's prompts: an InferenceX aggregated row's engine served
    its own HTTP (`vllm serve`, `sglang.launch_server`, `trtllm-serve`: one tokenizer thread);
    every other row went through Dynamo's frontend (InferenceX's disaggregated runs, and the
    deployments AIConfigurator generates: `python3 -m dynamo.frontend` in its 0.12.0 templates
    generator/config/backend_templates/{vllm,sglang,trtllm}/run.sh.j2), which tokenizes each
    request in its async runtime: no queue (cluster.tokenize_threads=0)."""
    threads = 1 if harness == "inferencex" and aggregated else 0
    return [f"cluster.tokenize_s_per_token={TOKENIZE_S_PER_TOKEN[harness]}", f"cluster.tokenize_threads={threads}"]


def measured_date(source: str) -> str:
    """The measurement date (YYYY-MM-DD) a `silicon_data_source` names, or "" where none."""
    found = re.search(r"measured=(\d{4}-\d\d-\d\d)", source) or re.search(r"source_file=(\d{4}-\d\d-\d\d)", source)
    return found.group(1) if found else ""


def harness_of(source: str) -> str:
    """The benchmark client a row's `silicon_data_source` names (module docstring)."""
    return "aiperf" if "aic-auto-gap-analysis" in source else "inferencex"


def trtllm_max_num_tokens(batch: int, isl_tokens: int, draft_tokens: int = 0) -> int:
    """The InferenceX TRT-LLM scripts' max_num_tokens: (drafts + 1) x max_batch_size + isl + 64,
    rounded up to 64 (the plain scripts have no drafts)."""
    return -(-((draft_tokens + 1) * batch + isl_tokens + 64) // 64) * 64


def image_of(source: str) -> str:
    """The container image a `silicon_data_source` names (`image=...`), or "" where none."""
    found = re.search(r"image=([^;\s]+)", source)
    return found.group(1) if found else ""


# Speculative decoding (MTP) by image. InferenceX's dsr1-fp{4,8}-b200-trt-mtp configs ran
# TensorRT-LLM release 1.2.0rc6.post3 from 2026-02-05 while dsr1-fp{4,8}-b200-trt stayed on
# release 1.2.0rc6.post2 (.github/configs/nvidia-master.yaml, every version 2026-02-07 to
# 2026-04-30), so a DeepSeek-R1 row of that image is an MTP run: dsr1_fp{4,8}_b200_trt_mtp.sh set
# num_nextn_predict_layers 3, or 1 with attention DP. (backend, image tail) -> (model paths,
# draft tokens, draft tokens under attention DP). SGLang's MTP configs share their images with
# the plain ones: their rows cannot be told apart, and none is replayed with MTP.
MTP_IMAGES: dict[tuple[str, str], tuple[tuple[str, ...], int, int]] = {
    ("trtllm", "tensorrt-llm/release:1.2.0rc6.post3"): (("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"), 3, 1),
}


def mtp_draft_tokens(backend: str, model_path: str, source: str, attention_dp: int) -> int:
    """Draft tokens per decode step the row's run speculated (0: none known; MTP_IMAGES)."""
    image = image_of(source).replace("#", "/")
    for (engine, tail), (models, tokens, dp_tokens) in MTP_IMAGES.items():
        if backend == engine and image.endswith(tail) and model_path in models:
            return dp_tokens if attention_dp > 1 else tokens
    return 0


# dsr1_fp4_b200_trt_mtp.sh / dsr1_fp8_b200_trt_mtp.sh under attention DP: max_batch_size =
# clients / 4 (fp4) or / 8 (fp8), the clients themselves below that many
MTP_DP_BATCH_DIVISOR = {"fp4": 4, "fp8": 8}


def mtp_overrides(draft_tokens: int, isl_tokens: int, concurrency: int, attention_dp: int,
                  precision: str) -> list[str]:
    """pdsim overrides of an MTP run as dsr1_fp{4,8}_b200_trt_mtp.sh deployed it: the drafts (the
    default acceptance, pdsim/perf/speculative.py), fp8 KV, no chunking and max_num_tokens =
    (drafts + 1) x max_batch_size + isl + 64 rounded up to 64, max_batch_size the clients (a
    share of them per rank under attention DP: MTP_DP_BATCH_DIVISOR); no batch waiting."""
    divisor = MTP_DP_BATCH_DIVISOR.get(precision, 1) if attention_dp > 1 else 1
    batch = concurrency if concurrency < divisor else concurrency // divisor
    budget = trtllm_max_num_tokens(batch, isl_tokens, draft_tokens)
    return [f"perf.mtp_draft_tokens={draft_tokens}", "model.kv_dtype=fp8", f"cluster.max_prefill_tokens={budget}",
            f"cluster.max_running_requests={batch}",
            "cluster.chunk_size_tokens=0", "cluster.batch_wait_iters=0", "cluster.batch_wait_tokens_ratio=0.0"]


# TensorRT-LLM's attention-DP balance (attention_dp_config: enable_balance) as InferenceX's
# launch scripts set it whenever they run attention DP: model path -> (timeout_iters,
# batching_wait_iters). dsr1_fp{4,8}_b200_trt.sh and their _mtp versions set 60 and 0 (since
# 2025-09-18); gptoss_fp4_b200_trt.sh enables it with TensorRT-LLM's defaults, 50 and 10 (since
# 2025-09-19). pdsim.policy.adp_balance is the mechanism.
TRTLLM_ADP_BALANCE: dict[str, tuple[int, int]] = {
    **{m: (60, 0) for m in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")},
    "openai/gpt-oss-120b": (50, 10),
}


def adp_balance_overrides(backend: str, model_path: str, attention_dp: int) -> list[str]:
    """pdsim overrides for the attention-DP balance an InferenceX TRT-LLM run had (none without
    attention DP, or for an engine or model whose script was not read)."""
    setting = TRTLLM_ADP_BALANCE.get(model_path) if backend == "trtllm" and attention_dp > 1 else None
    if setting is None:
        return []
    return ["cluster.adp_balance=true", f"cluster.adp_timeout_iters={setting[0]}",
            f"cluster.adp_batching_wait_iters={setting[1]}"]


def inferencex_workload(concurrency: int, isl_tokens: int, osl_tokens: int) -> list[str]:
    """pdsim overrides for InferenceX's bench_serving run: C clients, 10 C requests with lengths
    in [int(0.8 L), L], no warm-up in the statistics (the window is the whole run)."""
    r = INFERENCEX_RANGE_RATIO
    return [f"scenario.concurrency={concurrency}", "scenario.input.kind=random",
            f"scenario.input.value={isl_tokens}", f"scenario.input.range_ratio={r}",
            "scenario.output.kind=random", f"scenario.output.value={osl_tokens}",
            f"scenario.output.range_ratio={r}", f"scenario.num_requests={INFERENCEX_PROMPTS_PER_CLIENT * concurrency}",
            "scenario.warmup_requests=0", "scenario.warmup_barrier=true", "cluster.prefix_cache=false"]


def inferencex_layout(backend: str, tp: int, dp: int, moe_tp: int, moe_ep: int) -> tuple[int, int, int, int]:
    """The (tp, attention dp, moe_tp, moe_ep) an aggregated InferenceX row ran, from the layout
    its import wrote.

    InferenceX's launch scripts run one node, with EP either 1 or the script's TP (`--ep-size`,
    `--ep_size`, vLLM's `--enable-expert-parallel`), and vLLM never with data parallelism. Where
    the database recorded an EP run's GPUs as TP x EP, AIConfigurator's importer
    (sdk/config_adapter/inferencex.py) spread that product over the layout: a TP8 EP8 SGLang run
    reads tp 64, moe_tp 8, moe_ep 8; TRT-LLM's TP8 EP8 with attention DP reads dp 64, moe_tp 8;
    vLLM's TP4 with expert parallelism reads tp 4, dp 4, moe_ep 16. No script runs a layout with
    both MoE TP and EP above 1, so such a row is read back as the script's run: moe_tp GPUs, EP
    over all of them; vLLM rows lose their data parallelism (EP = TP when it was on).
    """
    if backend == "vllm" and dp > 1:
        return (tp, 1, 1, tp) if moe_ep > 1 else (tp, 1, tp, 1)
    if moe_tp > 1 and moe_ep > 1:
        gpus = moe_tp
        return (1, gpus, 1, moe_ep) if dp > 1 else (gpus, 1, 1, moe_ep)
    return tp, dp, moe_tp, moe_ep


@dataclass(frozen=True)
class Deployment:
    """An InferenceX launch script's scheduling settings for one (engine, model), as of one date.

    Budget: `max_num_tokens` tokens per forward (vLLM max-num-batched-tokens, SGLang
    chunked-prefill-size, TRT-LLM max_num_tokens; 0 keeps the rules' budget), or `isl_multiple` x
    the row's isl (vLLM `--max-num-batched-tokens $((ISL*2))`), or TRT-LLM's DeepSeek formula
    (`trtllm_clients_budget`: C + isl + 64 up to a multiple of 64, at least `max_num_tokens`).
    """

    script: str  # benchmarks/<script> in SemiAnalysisAI/InferenceX
    max_num_tokens: int = 0
    chunked: bool = True  # whether the engine chunks a prompt that overflows the budget
    kv_dtype: str = ""  # "" = as the row's precision gives it
    since: str = ""  # first measurement date (YYYY-MM-DD) this version of the script covers
    precisions: tuple[str, ...] = ()  # the rows' `precision` it deploys (empty: any)
    systems: tuple[str, ...] = ()  # the rows' `system` it deploys (empty: any)
    tp: int = 0  # only rows at this TP (0: any)
    isl_multiple: int = 0
    trtllm_clients_budget: bool = False
    max_running: int = 0  # SGLang --max-running-requests / vLLM --max-num-seqs (0: the rules')
    # TRT-LLM batch waiting (iterations, token ratio) on the (isl, osl) shapes below a TP size
    # and from a client count
    batch_wait: tuple[int, float] = (0, 0.0)
    batch_wait_shapes: tuple[tuple[int, int], ...] = ()
    batch_wait_below_tp: int = 1 << 30
    batch_wait_from_clients: int = 0
    # SGLang --scheduler-recv-interval (below RECV_INTERVAL_FROM_CLIENTS clients, from there up)
    recv_interval: tuple[int, int] = (1, 1)
    # the routed experts' kernel the script selects, where it is not the checkpoint's default
    # (vLLM's VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: MXFP4 experts with MXFP8 activations)
    moe_quant: str = ""
    # SGLang --tokenizer-worker-num: tokenizer processes (cluster.tokenize_threads)
    tokenizer_threads: int = 1
    # False: the script never passes vLLM's --enable-expert-parallel, so the EP of the master
    # config (and of the row) never reached the engine: its experts run TP over its GPUs
    expert_parallel: bool = True
    # vLLM --max-cudagraph-capture-size (perf.prefill_graph_max_tokens; 0: the engine's default)
    graph_max_tokens: int = 0
    # TRT-LLM moe_config.backend TRTLLM (the trtllm-gen kernels, priced from
    # silicon_recipes.TRTLLM_GEN_MOE_SETS) but DEEPGEMM on these (isl, osl, from clients)
    trtllm_gen_moe: bool = False
    deepgemm_from: tuple[tuple[int, int, int], ...] = ()
    # the engine's small-batch MoE kernel up to this many tokens (perf.moe_fallback_below_tokens;
    # 0: the engine's rule, silicon_engines.MOE_FALLBACK): MOE_FALLBACK_EVERY_SIZE where the script
    # turned DeepGEMM off, so vLLM ran its Triton fallback at every batch size
    moe_fallback_below_tokens: int = 0

    def covers(self, precision: str, system: str, tp: int, date: str) -> bool:
        return ((not self.precisions or precision in self.precisions) and (not self.systems or system in self.systems)
                and self.tp in (0, tp) and date >= self.since)  # "" (no date) is before every date

    def runs_trtllm_gen_moe(self, isl_tokens: int, osl_tokens: int, concurrency: int) -> bool:
        """Whether the script ran TRT-LLM's trtllm-gen MoE kernels at this shape and client count."""
        return self.trtllm_gen_moe and not any(
            (isl_tokens, osl_tokens) == (isl, osl) and concurrency >= clients for isl, osl, clients in self.deepgemm_from)

    def budget_tokens(self, isl_tokens: int, concurrency: int) -> int:
        """Tokens per forward (0: the rules' budget stays)."""
        if self.isl_multiple:
            return self.isl_multiple * isl_tokens
        if self.trtllm_clients_budget:
            return max(trtllm_max_num_tokens(concurrency, isl_tokens), self.max_num_tokens)
        return self.max_num_tokens

    def overrides(self, isl_tokens: int, osl_tokens: int, tp: int, concurrency: int) -> list[str]:
        """pdsim cluster/model overrides for a row of this deployment."""
        budget = self.budget_tokens(isl_tokens, concurrency)
        out = [] if budget == 0 else [f"cluster.max_prefill_tokens={budget}",
                                      f"cluster.chunk_size_tokens={budget if self.chunked else 0}"]
        if self.kv_dtype:
            out.append(f"model.kv_dtype={self.kv_dtype}")
        if self.max_running:
            out.append(f"cluster.max_running_requests={self.max_running}")
        if not self.expert_parallel:
            out.append("cluster.colocated_moe_ep=1")
        if self.tokenizer_threads != 1:
            out.append(f"cluster.tokenize_threads={self.tokenizer_threads}")
        if self.graph_max_tokens:
            out.append(f"perf.prefill_graph_max_tokens={self.graph_max_tokens}")
        if self.moe_fallback_below_tokens:
            out.append(f"perf.moe_fallback_below_tokens={self.moe_fallback_below_tokens}")
        if self.recv_interval != (1, 1):
            out.append(f"cluster.recv_interval_steps={self.recv_interval[concurrency >= RECV_INTERVAL_FROM_CLIENTS]}")
        if ((isl_tokens, osl_tokens) in self.batch_wait_shapes and tp < self.batch_wait_below_tp
                and concurrency >= self.batch_wait_from_clients):
            out += [f"cluster.batch_wait_iters={self.batch_wait[0]}",
                    f"cluster.batch_wait_tokens_ratio={self.batch_wait[1]}"]
        return out


RECV_INTERVAL_FROM_CLIENTS = 16
RECV = (10, 30)  # SGLang scripts: --scheduler-recv-interval 30 if CONC >= 16 else 10
DSR1 = ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")  # InferenceX's dsr1 rows, as AIConfigurator maps them
# gptoss_fp4_b200.sh exports VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (from 2025-09-24, before any
# dev row): FlashInfer's MXFP4 x MXFP8 MoE, the kernel TRT-LLM and SGLang run on Blackwell
MXFP4_MXFP8 = "w4a8_mxfp4_mxfp8"
VLLM_DEFAULT_TOKENS = 8192  # vLLM's API-server max-num-batched-tokens on GPUs of 70 GiB or more (arg_utils)
# --max-cudagraph-capture-size 2048: gptoss_fp4_b200 from 2025-11-19 (the vLLM 0.11.2 upgrade), minimaxm2.5_fp8_b200
# from 2026-04-03, minimaxm2.5_fp4_b200 from 2026-04-08 (#996), the B300 MiniMax scripts from their first version,
# kimik2.5_fp4_b200 from 2026-04-20 (#1047); no other vLLM script of the rows' window sets it (gpt-oss's
# dev rows are of 2025-11-02 and 2026-02-25, so its 2025-12-05 boundary below splits them the same way)
VLLM_CAPTURE_2048 = 2048
# minimaxm2.5_fp8_b200.sh exported VLLM_MOE_USE_DEEP_GEMM=0 (with VLLM_USE_FLASHINFER_MOE_FP8=0) from
# 2026-03-04 and VLLM_USE_DEEP_GEMM=0 from 2026-03-27 until 2026-04-01: without DeepGEMM (and with
# FlashInfer's FP8 MoE opt-in) vLLM ran the block-fp8 experts in Triton at every batch size
MOE_FALLBACK_EVERY_SIZE = 1 << 30

# (backend, model_path) -> the versions of its launch scripts (benchmarks/single_node/ in
# SemiAnalysisAI/InferenceX, read at each date's commit); a row takes the newest version whose
# precision, system and TP match and whose date it is measured on or after, else the rules'
# deployment (silicon_rows.budget_overrides). Memory fractions are not taken (KV capacity does not
# bind at these rows' concurrencies); stream intervals change no TTFT (both engines send the first
# token at once) and are not modelled.
_SGLANG_DSR1 = (
    Deployment("dsr1_fp4_b200.sh, dsr1_fp4_b300.sh", 16384, True, "fp8", precisions=("fp4",), max_running=256,
               recv_interval=RECV),
    Deployment("dsr1_fp8_b200.sh (TP8), dsr1_fp8_b300.sh", 32768, True, "fp8", precisions=("fp8",), tp=8,
               max_running=128, recv_interval=RECV),
    Deployment("dsr1_fp8_b200.sh (TP4, from 2026-01-13)", 8192, True, "fp8", since="2026-01-13", precisions=("fp8",),
               tp=4, max_running=32, recv_interval=(10, 10)),
)
# dsr1_fp8_b200_trt.sh set moe_config.backend DEEPGEMM until 2026-01-29 (#594), then TRTLLM (the
# trtllm-gen kernels) but DEEPGEMM at 1k/8k from 256 clients; AIConfigurator's TRT-LLM sets timed
# fp8 block-scale experts with DeepGEMM only (silicon_recipes.TRTLLM_GEN_MOE_SETS says where the
# trtllm-gen ones were measured; silicon.py prices them so at MoE TP, --trtllm-moe says where)
_TRTLLM_DSR1 = (
    Deployment("dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh", 0, False, "fp8", trtllm_clients_budget=True),
    Deployment("dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh (from 2026-01-21)", 8192, False, "fp8", since="2026-01-21",
               trtllm_clients_budget=True),
    Deployment("dsr1_fp8_b200_trt.sh (from 2026-01-29)", 8192, False, "fp8", since="2026-01-29", precisions=("fp8",),
               trtllm_clients_budget=True, batch_wait=(40, 0.8), batch_wait_shapes=((1024, 1024),),
               batch_wait_from_clients=64, trtllm_gen_moe=True, deepgemm_from=((1024, 8192, 256),)),
)
# every Qwen3.5 script (and its _mtp version) runs --tokenizer-worker-num 6 from 2026-02-19 (#758),
# before the first Qwen3.5 row (2026-02-20)
QWEN35_TOKENIZERS = 6
_SGLANG_QWEN35 = (
    Deployment("qwen3.5_{bf16,fp8,fp4}_b200.sh, qwen3.5_{bf16,fp4}_b300.sh", 32768, True, max_running=128,
               recv_interval=RECV, tokenizer_threads=QWEN35_TOKENIZERS),
    Deployment("qwen3.5_fp8_b200.sh", 32768, True, "fp8", precisions=("fp8",), max_running=128, recv_interval=RECV,
               tokenizer_threads=QWEN35_TOKENIZERS),
    Deployment("qwen3.5_fp4_b200.sh, qwen3.5_fp4_b300.sh", 32768, True, "fp8", precisions=("fp4",), max_running=128,
               recv_interval=RECV, tokenizer_threads=QWEN35_TOKENIZERS),
    Deployment("qwen3.5_fp8_b300.sh", 16384, True, "fp8", precisions=("fp8",), systems=("b300_sxm",),
               recv_interval=(10, 10), tokenizer_threads=QWEN35_TOKENIZERS),
)
INFERENCEX_DEPLOYMENTS: dict[tuple[str, str], tuple[Deployment, ...]] = {
    ("vllm", "meta-llama/Llama-3.1-70B"): (
        Deployment("70b_fp8_h100_slurm.sh, 70b_fp4_b200_docker.sh", 8192, True, "fp8"),),
    ("trtllm", "meta-llama/Llama-3.1-70B"): (Deployment(
        "70b_fp8_b200_trt_slurm.sh, 70b_fp4_b200_trt_slurm.sh", 16384, False, "fp8",
        batch_wait=(20, 0.9), batch_wait_shapes=((1024, 1024),), batch_wait_below_tp=8),),
    **{("sglang", m): _SGLANG_DSR1 for m in DSR1},
    **{("trtllm", m): _TRTLLM_DSR1 for m in DSR1},
    ("sglang", "Qwen/Qwen3.5-397B-A17B"): _SGLANG_QWEN35,
    ("trtllm", "openai/gpt-oss-120b"): (Deployment("gptoss_fp4_b200_trt.sh", 20000, False, "fp8", max_running=512),),
    ("vllm", "openai/gpt-oss-120b"): (
        Deployment("gptoss_fp4_b200.sh (before 2025-12-05)", 8192, True, systems=("b200_sxm",), max_running=512,
                   moe_quant=MXFP4_MXFP8),
        Deployment("gptoss_fp4_b200.sh", 8192, True, "fp8", since="2025-12-05", systems=("b200_sxm",),
                   moe_quant=MXFP4_MXFP8, max_running=512, graph_max_tokens=VLLM_CAPTURE_2048),
        Deployment("gptoss_fp4_h100.sh", 8192, True, systems=("h100_sxm",)),
    ),
    ("vllm", "MiniMaxAI/MiniMax-M2.5"): (
        Deployment("minimaxm2.5_fp8_b200.sh (before 2026-04-03), minimaxm2.5_fp8_h100.sh", VLLM_DEFAULT_TOKENS, True,
                   precisions=("fp8",)),
        Deployment("minimaxm2.5_fp8_b200.sh (2026-03-04 to 2026-04-01: DeepGEMM off)", VLLM_DEFAULT_TOKENS, True,
                   since="2026-03-04", precisions=("fp8",), systems=("b200_sxm",),
                   moe_fallback_below_tokens=MOE_FALLBACK_EVERY_SIZE),
        Deployment("minimaxm2.5_fp8_b200.sh, minimaxm2.5_fp8_b300.sh (from 2026-04-03)", kv_dtype="fp8",
                   since="2026-04-03", precisions=("fp8",), systems=("b200_sxm", "b300_sxm"), isl_multiple=2,
                   graph_max_tokens=VLLM_CAPTURE_2048),
        Deployment("minimaxm2.5_fp4_b200.sh (nightly image, 2026-04-02)", VLLM_DEFAULT_TOKENS, True, "fp8",
                   precisions=("fp4",), systems=("b200_sxm",)),
        Deployment("minimaxm2.5_fp4_b200.sh (from 2026-04-08, #996), minimaxm2.5_fp4_b300.sh", kv_dtype="fp8",
                   since="2026-04-08", precisions=("fp4",), systems=("b200_sxm", "b300_sxm"), isl_multiple=2,
                   graph_max_tokens=VLLM_CAPTURE_2048),
    ),
    # no Kimi script of the rows' window passes --enable-expert-parallel: the master config's
    # `ep: 4` rows (tp 4) ran the experts TP4
    ("vllm", "moonshotai/Kimi-K2.5"): (
        Deployment("kimik2.5_int4_b200.sh, kimik2.5_fp4_b{200,300}.sh (before 2026-04-20)", VLLM_DEFAULT_TOKENS, True,
                   expert_parallel=False),
        Deployment("kimik2.5_fp4_b200.sh (from 2026-04-20)", kv_dtype="fp8", since="2026-04-20", precisions=("fp4",),
                   systems=("b200_sxm",), isl_multiple=2, expert_parallel=False, graph_max_tokens=VLLM_CAPTURE_2048),
    ),
}


def deployment_for(backend: str, model_path: str, precision: str, system: str, tp: int,
                   date: str) -> Deployment | None:
    """The launch script version that deployed a row: the newest (then the most specific) entry
    covering its precision, system, TP and measurement date; None where no script was read."""
    covering = [d for d in INFERENCEX_DEPLOYMENTS.get((backend, model_path), ()) if d.covers(precision, system, tp, date)]
    if not covering:
        return None
    return max(covering, key=lambda d: (d.since, bool(d.tp) + bool(d.systems) + bool(d.precisions)))
