"""How the disaggregated rows were deployed: NVIDIA srt-slurm's recipes.

InferenceX ran its multi-node disaggregated DeepSeek-R1 results (Dynamo + SGLang or TRT-LLM, the
rows measured 2026-01/03) from NVIDIA's srt-slurm recipes, named per (GPU, precision, isl/osl) and
curve point in its `configs/nvidia-master.yaml` (`CONFIG_FILE=recipes/<gpu>-<precision>/...`).
A row names only its layouts and worker counts; the recipe of that point sets the rest. Read from
the recipes as of the measurements (srt-slurm `recipes/`, versions of 2026-02-04 and 2026-03-03):

- **MoE exchange** per side (`--moe-a2a-backend`): GB300 fp8 runs DeepEP on both sides (normal
  mode on its DP8 prefill, low latency on its decode); GB300 fp4 on its decode only (low latency,
  NVFP4 dispatch), its prefill takes the gathered tokens (FlashInfer CUTLASS / TRT-LLM MoE); the
  B200 and H100 recipes set no a2a backend on either side. TRT-LLM's rows keep the all-gather /
  reduce-scatter exchange (its alltoall path is not modelled).
- **SGLang prefill token budget** per DP rank: min(`--max-prefill-tokens`,
  `--chunked-prefill-size` / DP size): SGLang divides the chunk by the DP size under DP attention
  and its default max-prefill-tokens is 16384. (max-prefill-tokens, chunked-prefill-size): B200
  32768 / 32768 (65536 / 65536 on the fp4 8k/1k 7-prefill max-throughput point). GB300 fp4:
  32768 / 65536 on its DP4 prefills (1k prompts), 524288 / 131072 on the TP4 prefills behind a DP
  decode (8k/1k), 16384 / 8192 and 16384 / 24576 on the low-latency points (1k / 8k prompts).
  GB300 fp8: 16384 / 131072 on its DP8 prefills, 8192 / 8192 and 32768 / 32768 on the
  low-latency points. H100: 2048 / 2048.
- **TRT-LLM context servers** run attention DP on every recipe, each rank taking up to
  `max_batch_size` prompts and `max_num_tokens` tokens per forward, unchunked: by (GPU,
  precision, prompt length) B200 fp4 8 / 10240 (1k) and 2 / 16896 (8k), B200 fp8 16 / 16384 and
  1 / 8320, B300 fp4 as B200 fp4, B300 fp8 8 / 8320, GB300 fp4 16 / 16384 and 2 / 16640, GB300
  fp8 16 / 16384 and 2 / 16384, H100 fp8 2 / 2048 and 1 / 8224. A rank's budget is the smaller of
  max_num_tokens and max_batch_size full-length prompts.
- **TRT-LLM generation servers** take `max_batch_size` requests (per rank under attention DP);
  the recipes were run at concurrencies above that on some points (4 servers x 4 = 16 slots at 24
  clients): the clients past the slots wait for a request to finish, which is what makes those
  rows' TTFT seconds long. `TRTLLM_GENERATION` holds every STP recipe's batch and concurrencies
  by (GPU, precision, isl, osl, context servers, generation servers, their GPUs, attention DP).

- **TRT-LLM's MoE kernel** per side (`moe_config.backend`) on the fp8 recipes: `TRTLLM`
  (TensorRT-LLM's own trtllm-gen block-scale kernels) or `DEEPGEMM`. B300: TRTLLM on both sides.
  B200: TRTLLM on both sides at 8k prompts; at 1k the context servers run DEEPGEMM, and so do
  attention-DP generation servers, where a TP generation server runs TRTLLM. GB300: DEEPGEMM on the
  context servers and on attention-DP generation servers, TRTLLM on TP ones. AIConfigurator's
  TRT-LLM sets measured fp8 block-scale experts with DeepGEMM only (`kernel_source` deepgemm); its
  SGLang sets measured the trtllm-gen kernels through FlashInfer (`sglang_flashinfer_trtllm_moe`),
  so a TRTLLM side without expert parallelism prices its experts from the SGLang set of its GPU
  (`TRTLLM_GEN_MOE_SETS`, `cluster.<side>_moe_table_set`; `silicon.py --trtllm-moe`, default
  recipe_tp); under EP SGLang's path around the kernel is not TRT-LLM's and the side keeps
  DeepGEMM's rows (docs/SILICON.md says why). The gap is widest at MoE TP8 and few tokens: 0.035 ms
  a layer at one token on B200 against DeepGEMM's 0.098.
- **KV cache**: every SGLang recipe of B200 and GB300 (fp4 and fp8, every isl/osl point) sets
  `--kv-cache-dtype fp8_e4m3` on both sides, where SGLang's default is the model's dtype (bf16
  here); the H100 recipes set none. TRT-LLM's recipes set `kv_cache_config.dtype: fp8`, its
  default for these checkpoints already (silicon_engines.ENGINES).

The values are per DP rank, as SGLang and TRT-LLM apply them and as pdsim's cluster fields read
them (policy.limits.StepLimits.from_config scales them by the instance's DP ranks).
"""

from __future__ import annotations

from typing import Protocol

SGLANG_FP8_KV_SYSTEMS = ("b200_sxm", "gb300")  # SGLang recipes with --kv-cache-dtype fp8_e4m3
# TRT-LLM fp8 recipes' moe_config.backend by (system, isl): (context servers, TP generation
# servers, attention-DP generation servers); "TRTLLM" = the trtllm-gen kernels
TRTLLM_FP8_MOE_BACKEND = {
    ("b200_sxm", 1024): ("DEEPGEMM", "TRTLLM", "DEEPGEMM"), ("b200_sxm", 8192): ("TRTLLM", "TRTLLM", "TRTLLM"),
    ("b300_sxm", 1024): ("TRTLLM", "TRTLLM", "TRTLLM"), ("b300_sxm", 8192): ("TRTLLM", "TRTLLM", "TRTLLM"),
    ("gb300", 1024): ("DEEPGEMM", "TRTLLM", "DEEPGEMM"), ("gb300", 8192): ("DEEPGEMM", "TRTLLM", "DEEPGEMM"),
}
# the table set whose fp8 block-scale MoE rows are the trtllm-gen kernels (FlashInfer's, measured
# under SGLang), by GPU
TRTLLM_GEN_MOE_SETS = {"b200_sxm": "b200_sxm_sglang_0.5.14", "b300_sxm": "b300_sxm_sglang_0.5.14",
                       "gb300": "gb300_sglang_0.5.14"}
DEEPEP_SIDES = {("sglang", "gb300", "fp8"): ("prefill", "decode"), ("sglang", "gb300", "fp4"): ("decode",)}
SGLANG_DEFAULT_MAX_PREFILL_TOKENS = 16384
# TRT-LLM context server per rank: (max_batch_size, max_num_tokens) by (system, precision, long prompts)
TRTLLM_CONTEXT = {
    ("b200_sxm", "fp4", False): (8, 10240), ("b200_sxm", "fp4", True): (2, 16896),
    ("b200_sxm", "fp8", False): (16, 16384), ("b200_sxm", "fp8", True): (1, 8320),
    ("b300_sxm", "fp4", False): (8, 10240), ("b300_sxm", "fp4", True): (2, 16896),
    ("b300_sxm", "fp8", False): (8, 8320), ("b300_sxm", "fp8", True): (8, 8320),
    ("gb300", "fp4", False): (16, 16384), ("gb300", "fp4", True): (2, 16640),
    ("gb300", "fp8", False): (16, 16384), ("gb300", "fp8", True): (2, 16384),
    ("h100_sxm", "fp8", False): (2, 2048), ("h100_sxm", "fp8", True): (1, 8224),
}


# TRT-LLM generation server per rank: (max_batch_size, the concurrencies it was run at) by (system,
# precision, isl, osl, context servers, generation servers, GPUs a generation server, attention DP)
TRTLLM_GENERATION: dict[tuple[str, str, int, int, int, int, int, bool], tuple[tuple[int, tuple[int, ...]], ...]] = {
    ('b200_sxm', 'fp4', 1024, 1024, 1, 1, 8, True): ((512, (4096,)),),
    ('b200_sxm', 'fp4', 1024, 1024, 1, 2, 8, True): ((128, (2192,)),),
    ('b200_sxm', 'fp4', 1024, 1024, 1, 5, 8, False): ((1, (6,)), (32, (10, 15, 25, 45, 90, 180))),
    ('b200_sxm', 'fp4', 1024, 1024, 1, 5, 8, True): ((32, (1365,)),),
    ('b200_sxm', 'fp4', 1024, 1024, 1, 6, 8, False): ((64, (450,)),),
    ('b200_sxm', 'fp4', 8192, 1024, 1, 5, 8, False): ((1, (6,)), (16, (10, 15, 25, 50, 100))),
    ('b200_sxm', 'fp4', 8192, 1024, 2, 5, 8, False): ((64, (370,)),),
    ('b200_sxm', 'fp4', 8192, 1024, 4, 1, 8, True): ((192, (1606,)),),
    ('b200_sxm', 'fp4', 8192, 1024, 4, 3, 8, True): ((32, (837,)),),
    ('b200_sxm', 'fp4', 8192, 1024, 7, 2, 8, True): ((128, (2222,)),),
    ('b200_sxm', 'fp8', 1024, 1024, 1, 1, 8, True): ((512, (4096,)),),
    ('b200_sxm', 'fp8', 1024, 1024, 1, 3, 8, False): ((1, (4,)), (12, (32,)), (1024, (128,))),
    ('b200_sxm', 'fp8', 1024, 1024, 1, 5, 8, True): ((48, (1920,)),),
    ('b200_sxm', 'fp8', 1024, 1024, 2, 5, 8, True): ((128, (5152,)),),
    ('b200_sxm', 'fp8', 8192, 1024, 1, 1, 8, False): ((1, (1,)),),
    ('b200_sxm', 'fp8', 8192, 1024, 1, 1, 8, True): ((128, (128,)), (256, (256,))),
    ('b200_sxm', 'fp8', 8192, 1024, 1, 2, 8, True): ((64, (128,)),),
    ('b200_sxm', 'fp8', 8192, 1024, 1, 4, 8, False): ((8, (32,)), (32, (128,))),
    ('b200_sxm', 'fp8', 8192, 1024, 1, 6, 8, False): ((16, (96,)),),
    ('b200_sxm', 'fp8', 8192, 1024, 2, 1, 8, True): ((640, (640,)),),
    ('b300_sxm', 'fp4', 1024, 1024, 1, 2, 8, True): ((64, (1176,)),),
    ('b300_sxm', 'fp4', 1024, 1024, 1, 4, 8, False): ((1, (6,)),),
    ('b300_sxm', 'fp4', 1024, 1024, 1, 5, 4, False): ((4, (5, 10, 15, 25)),),
    ('b300_sxm', 'fp4', 1024, 1024, 1, 5, 8, False): ((64, (60, 110, 195, 395)),),
    ('b300_sxm', 'fp4', 1024, 1024, 2, 1, 8, True): ((512, (4405,)),),
    ('b300_sxm', 'fp4', 1024, 1024, 3, 1, 8, True): ((1024, (8192,)),),
    ('b300_sxm', 'fp4', 1024, 1024, 3, 2, 8, True): ((256, (4611,)),),
    ('b300_sxm', 'fp4', 8192, 1024, 1, 3, 4, False): ((32, (105,)),),
    ('b300_sxm', 'fp4', 8192, 1024, 1, 3, 8, False): ((1, (4,)), (16, (63,))),
    ('b300_sxm', 'fp4', 8192, 1024, 1, 4, 4, False): ((2, (12,)),),
    ('b300_sxm', 'fp4', 8192, 1024, 5, 2, 8, True): ((32, (589,)),),
    ('b300_sxm', 'fp4', 8192, 1024, 6, 1, 8, True): ((128, (1093,)),),
    ('b300_sxm', 'fp4', 8192, 1024, 8, 1, 8, True): ((256, (2048,)),),
    ('b300_sxm', 'fp8', 1024, 1024, 1, 1, 8, True): ((256, (2112,)),),
    ('b300_sxm', 'fp8', 1024, 1024, 1, 2, 8, True): ((128, (3072,)),),
    ('b300_sxm', 'fp8', 1024, 1024, 1, 3, 8, True): ((48, (1280,)),),
    ('b300_sxm', 'fp8', 1024, 1024, 1, 8, 8, False): ((1, (10,)), (64, (128,)), (64, (384,))),
    ('b300_sxm', 'fp8', 1024, 1024, 2, 1, 8, True): ((1024, (16384,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 1, 4, 8, False): ((16, (64,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 1, 8, 8, False): ((1, (10,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 2, 1, 8, True): ((32, (256,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 3, 1, 8, True): ((64, (512,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 3, 5, 8, False): ((64, (256,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 5, 1, 8, True): ((128, (1075,)),),
    ('b300_sxm', 'fp8', 8192, 1024, 7, 1, 8, True): ((384, (3072,)),),
    ('gb300', 'fp4', 1024, 1024, 1, 4, 8, False): ((1, (5,)), (32, (12, 48, 96, 192))),
    ('gb300', 'fp4', 1024, 1024, 2, 1, 8, True): ((1024, (8192,)),),
    ('gb300', 'fp4', 1024, 1024, 2, 1, 32, True): ((32, (1229,)),),
    ('gb300', 'fp4', 1024, 1024, 3, 1, 16, True): ((256, (4301,)),),
    ('gb300', 'fp4', 1024, 1024, 3, 1, 32, True): ((64, (2253,)),),
    ('gb300', 'fp4', 1024, 8192, 1, 1, 32, True): ((32, (1024,)), (128, (4096,)), (256, (8192,))),
    ('gb300', 'fp4', 1024, 8192, 1, 7, 8, False): ((1, (7,)), (32, (245,))),
    ('gb300', 'fp4', 1024, 8192, 1, 15, 4, False): ((4, (60,)),),
    ('gb300', 'fp4', 8192, 1024, 1, 3, 8, False): ((16, (72,)),),
    ('gb300', 'fp4', 8192, 1024, 1, 4, 8, False): ((1, (5,)), (2, (12,))),
    ('gb300', 'fp4', 8192, 1024, 1, 5, 4, False): ((4, (5, 15, 30)),),
    ('gb300', 'fp4', 8192, 1024, 7, 1, 32, True): ((16, (666,)),),
    ('gb300', 'fp4', 8192, 1024, 9, 1, 16, True): ((64, (1229,)),),
    ('gb300', 'fp4', 8192, 1024, 11, 3, 4, True): ((256, (3228,)),),
    ('gb300', 'fp4', 8192, 1024, 14, 1, 16, True): ((128, (2253,)),),
    ('gb300', 'fp8', 1024, 1024, 1, 4, 8, False): ((1, (4,)), (4, (24,)), (16, (84,))),
    ('gb300', 'fp8', 1024, 1024, 2, 1, 16, True): ((128, (2253,)),),
    ('gb300', 'fp8', 1024, 1024, 2, 1, 32, True): ((32, (1229,)),),
    ('gb300', 'fp8', 1024, 1024, 3, 2, 8, True): ((512, (8602,)), (768, (12288,))),
    ('gb300', 'fp8', 1024, 8192, 1, 1, 32, True): ((8, (282,)), (32, (1024,))),
    ('gb300', 'fp8', 1024, 8192, 1, 2, 16, True): ((128, (4096,)), (256, (8192,))),
    ('gb300', 'fp8', 1024, 8192, 1, 4, 8, False): ((1, (4,)), (8, (36,))),
    ('gb300', 'fp8', 8192, 1024, 1, 4, 8, False): ((1, (4,)), (4, (24,)), (8, (36,))),
    ('gb300', 'fp8', 8192, 1024, 4, 1, 16, True): ((32, (666,)),),
    ('gb300', 'fp8', 8192, 1024, 6, 1, 32, True): ((16, (512,)),),
    ('gb300', 'fp8', 8192, 1024, 7, 1, 8, True): ((256, (2151,)),),
    ('gb300', 'fp8', 8192, 1024, 7, 1, 16, True): ((64, (1229,)),),
    ('h100_sxm', 'fp8', 1024, 1024, 1, 3, 16, False): ((1, (6,)), (2, (9,)), (8, (30,)), (16, (60,))),
    ('h100_sxm', 'fp8', 1024, 1024, 1, 3, 16, True): ((4, (231,)), (8, (462,)), (16, (924,)), (32, (1845,))),
    ('h100_sxm', 'fp8', 1024, 1024, 2, 1, 16, True): ((256, (4916,)),),
    ('h100_sxm', 'fp8', 8192, 1024, 1, 2, 16, False): ((64, (154,)),),
    ('h100_sxm', 'fp8', 8192, 1024, 1, 3, 16, False): ((1, (6,)), (2, (9,)), (8, (30,))),
    ('h100_sxm', 'fp8', 8192, 1024, 2, 1, 16, True): ((16, (308,)),),
}


class Layout(Protocol):
    """One side of a row (silicon_parse.Side)."""

    tp: int
    attention_dp: int
    moe_ep: int
    workers: int


def recipe_kv_dtype(backend: str, system: str) -> str:
    """The KV-cache dtype a disaggregated row's recipe sets ("" = none: the engine's default)."""
    return "fp8" if backend == "sglang" and system in SGLANG_FP8_KV_SYSTEMS else ""


def reads_trtllm_gen_table(source: str, moe_ep: int) -> bool:
    """Whether a side that runs the trtllm-gen MoE kernels is priced from the SGLang set's timing of
    them under `source` (silicon_rows.TRTLLM_MOE_SOURCES): always under "recipe"; under "recipe_tp"
    only without expert parallelism, the split in which SGLang calls the kernel as TRT-LLM does."""
    return source == "recipe" or (source == "recipe_tp" and moe_ep == 1)


def trtllm_moe_table_overrides(system: str, precision: str, isl_tokens: int, prefill: Layout, decode: Layout,
                               source: str = "recipe") -> list[str]:
    """cluster.<side>_moe_table_set for the sides of a TRT-LLM fp8 recipe that run the trtllm-gen
    MoE kernels (TRTLLM_FP8_MOE_BACKEND) and read them from the SGLang set under `source`
    (reads_trtllm_gen_table); none elsewhere."""
    backends = TRTLLM_FP8_MOE_BACKEND.get((system, isl_tokens)) if precision == "fp8" else None
    if backends is None:
        return []
    context, generation_tp, generation_dp = backends
    sides = {"prefill": (context, prefill),
             "decode": (generation_dp if decode.attention_dp > 1 else generation_tp, decode)}
    return [f"cluster.{side}_moe_table_set={TRTLLM_GEN_MOE_SETS[system]}"
            for side, (backend, layout) in sides.items()
            if backend == "TRTLLM" and reads_trtllm_gen_table(source, layout.moe_ep)]


def moe_a2a(backend: str, system: str, precision: str, side: str) -> str:
    """allgather | deepep: how `side` (prefill | decode | colocated) reaches its experts."""
    return "deepep" if side in DEEPEP_SIDES.get((backend, system, precision), ()) else "allgather"


def sglang_prefill_recipe(system: str, precision: str, isl_tokens: int, prefill: Layout,
                          decode: Layout) -> tuple[int, int]:
    """(--max-prefill-tokens, --chunked-prefill-size) of the row's prefill recipe ((0, 0): none known)."""
    long_prompts = isl_tokens > 1024
    if system == "b200_sxm":
        return (65536, 65536) if precision == "fp4" and long_prompts and prefill.workers == 7 else (32768, 32768)
    if system == "gb300" and precision == "fp4":
        if prefill.attention_dp > 1:
            return 32768, 65536
        if decode.attention_dp > 1:
            return 524288, 131072
        return SGLANG_DEFAULT_MAX_PREFILL_TOKENS, 24576 if long_prompts else 8192
    if system == "gb300" and precision == "fp8":
        if prefill.attention_dp > 1:
            return SGLANG_DEFAULT_MAX_PREFILL_TOKENS, 131072
        return (32768, 32768) if long_prompts else (8192, 8192)
    if system == "h100_sxm":
        return 2048, 2048
    return 0, 0


def sglang_prefill_rank_budget(system: str, precision: str, isl_tokens: int, prefill: Layout, decode: Layout) -> int:
    """Tokens one prefill DP rank takes per forward (0: no recipe known). Under DP attention SGLang
    divides --chunked-prefill-size by the DP size (server_args: "to avoid MoE kernel issues") and
    keeps --max-prefill-tokens per rank."""
    max_prefill, chunk = sglang_prefill_recipe(system, precision, isl_tokens, prefill, decode)
    return min(max_prefill, chunk // max(1, prefill.attention_dp))


def trtllm_prefill_rank_budget(system: str, precision: str, isl_tokens: int) -> int:
    """Tokens one context-server DP rank takes per forward under the row's recipe (0: none known)."""
    recipe = TRTLLM_CONTEXT.get((system, precision, isl_tokens > 1024))
    if recipe is None:
        return 0
    max_batch, max_tokens = recipe
    return min(max_tokens, max_batch * isl_tokens)


def prefill_overrides(backend: str, system: str, precision: str, isl_tokens: int, prefill: Layout,
                      decode: Layout) -> list[str]:
    """pdsim's prefill budget and chunking for a disaggregated row ([] where no recipe is known)."""
    if backend == "sglang":
        rank = sglang_prefill_rank_budget(system, precision, isl_tokens, prefill, decode)
        return [f"cluster.max_prefill_tokens={rank}", f"cluster.chunk_size_tokens={rank}"] if rank else []
    if backend == "trtllm":
        rank = trtllm_prefill_rank_budget(system, precision, isl_tokens)
        return [f"cluster.max_prefill_tokens={rank}", "cluster.chunk_size_tokens=0"] if rank else []
    return []


def trtllm_generation_batch(system: str, precision: str, isl_tokens: int, osl_tokens: int, prefill: Layout,
                            decode: Layout, concurrency: int) -> int:
    """Requests one TRT-LLM generation rank runs under the recipe run at this point (0: none known)."""
    key = (system, precision, isl_tokens, osl_tokens, prefill.workers, decode.workers,
           decode.tp * decode.attention_dp, decode.attention_dp > 1)
    batches = [batch for batch, concurrencies in TRTLLM_GENERATION.get(key, ()) if concurrency in concurrencies]
    return batches[0] if len(batches) == 1 else 0
