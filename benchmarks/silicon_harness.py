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

from dataclasses import dataclass

HARNESSES = ("aiperf", "inferencex")
INFERENCEX_RANGE_RATIO, INFERENCEX_PROMPTS_PER_CLIENT = 0.8, 10


def harness_of(source: str) -> str:
    """The benchmark client a row's `silicon_data_source` names (module docstring)."""
    return "aiperf" if "aic-auto-gap-analysis" in source else "inferencex"


def inferencex_workload(concurrency: int, isl_tokens: int, osl_tokens: int) -> list[str]:
    """pdsim overrides for InferenceX's bench_serving run: C clients, 10 C requests with lengths
    in [int(0.8 L), L], no warm-up in the statistics (the window is the whole run)."""
    r = INFERENCEX_RANGE_RATIO
    return [f"scenario.concurrency={concurrency}", "scenario.input.kind=random",
            f"scenario.input.value={isl_tokens}", f"scenario.input.range_ratio={r}",
            "scenario.output.kind=random", f"scenario.output.value={osl_tokens}",
            f"scenario.output.range_ratio={r}", f"scenario.num_requests={INFERENCEX_PROMPTS_PER_CLIENT * concurrency}",
            "scenario.warmup_requests=0", "scenario.warmup_barrier=true", "cluster.prefix_cache=false"]


@dataclass(frozen=True)
class Deployment:
    """An InferenceX launch script's scheduling settings for one (engine, model)."""

    script: str  # benchmarks/<script> in SemiAnalysisAI/InferenceX
    max_num_tokens: int  # vLLM max-num-batched-tokens / TRT-LLM max_num_tokens (0: the rules' budget stays)
    chunked: bool  # whether the engine chunks a prompt that overflows the budget
    kv_dtype: str  # "" = as the row's precision gives it
    # TRT-LLM batch waiting (iterations, token ratio) on the (isl, osl) shapes below a TP size
    batch_wait: tuple[int, float] = (0, 0.0)
    batch_wait_shapes: tuple[tuple[int, int], ...] = ()
    batch_wait_below_tp: int = 0
    # SGLang --scheduler-recv-interval (below RECV_INTERVAL_FROM_CLIENTS clients, from there up)
    recv_interval: tuple[int, int] = (1, 1)

    def overrides(self, isl_tokens: int, osl_tokens: int, tp: int, concurrency: int) -> list[str]:
        """pdsim cluster/model overrides for a row of this deployment."""
        out = [] if self.max_num_tokens == 0 else [
            f"cluster.max_prefill_tokens={self.max_num_tokens}",
            f"cluster.chunk_size_tokens={self.max_num_tokens if self.chunked else 0}"]
        if self.kv_dtype:
            out.append(f"model.kv_dtype={self.kv_dtype}")
        if self.recv_interval != (1, 1):
            out.append(f"cluster.recv_interval_steps={self.recv_interval[concurrency >= RECV_INTERVAL_FROM_CLIENTS]}")
        if (isl_tokens, osl_tokens) in self.batch_wait_shapes and tp < self.batch_wait_below_tp:
            out += [f"cluster.batch_wait_iters={self.batch_wait[0]}",
                    f"cluster.batch_wait_tokens_ratio={self.batch_wait[1]}"]
        return out


RECV_INTERVAL_FROM_CLIENTS = 16
# SGLang DeepSeek-R1 and Qwen3.5 scripts (dsr1_fp4_b200.sh, dsr1_fp8_b200.sh, qwen3.5_*_b200.sh and
# their B300 copies): `--scheduler-recv-interval` 30 if CONC >= 16 else 10. Only that setting is
# taken from them so far (their chunked-prefill sizes, memory fractions and fp8 KV are not);
# exceptions not modelled: dsr1_fp8_b200.sh's TP4 branch (8k/1k) and qwen3.5_fp8_b300.sh use 10.
SGLANG_RECV = Deployment("dsr1_fp4_b200.sh, dsr1_fp8_b200.sh, qwen3.5_*_b200.sh", 0, True, "", recv_interval=(10, 30))

# (backend, model_path) -> the launch script's settings. vLLM: `kv-cache-dtype: fp8`,
# `max-num-batched-tokens: 8192`, chunked prefill (V1 always chunks). TRT-LLM: `--max_num_tokens
# 16384`, `kv_cache_config.dtype: fp8`, no chunked context, and on 1k/1k below TP8
# `batch_wait_timeout_iters: 20` with `batch_wait_max_tokens_ratio: 0.9`.
INFERENCEX_DEPLOYMENTS: dict[tuple[str, str], Deployment] = {
    ("vllm", "meta-llama/Llama-3.1-70B"): Deployment("70b_fp8_h100_slurm.sh, 70b_fp4_b200_docker.sh", 8192, True, "fp8"),
    ("trtllm", "meta-llama/Llama-3.1-70B"): Deployment(
        "70b_fp8_b200_trt_slurm.sh, 70b_fp4_b200_trt_slurm.sh", 16384, False, "fp8",
        batch_wait=(20, 0.9), batch_wait_shapes=((1024, 1024),), batch_wait_below_tp=8),
    ("sglang", "deepseek-ai/DeepSeek-R1"): SGLANG_RECV,
    ("sglang", "deepseek-ai/DeepSeek-V3"): SGLANG_RECV,  # (InferenceX's dsr1 rows, as AIConfigurator maps them)
    ("sglang", "Qwen/Qwen3.5-397B-A17B"): SGLANG_RECV,
}
