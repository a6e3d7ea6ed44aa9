"""The workload groups: `scenario` (arrivals, lengths, prefixes, the closed loop)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pdsim.config.missing import MISSING


@dataclass
class LengthDist:
    """A token-length distribution. kind: fixed | random | uniform | lognormal | empirical.

    `random` is sglang bench_serving's random dataset: integers drawn uniformly from
    [max(int(value * range_ratio), 1), value] (docs/CLOSED_LOOP.md)."""

    kind: str = "fixed"
    value: int = 512  # fixed; random: the upper bound
    range_ratio: float = 1.0  # random: lower bound = int(value * range_ratio) (1.0 = fixed)
    low: int = 1  # uniform (inclusive), also the clip floor for lognormal/empirical
    high: int = 4096  # uniform (inclusive), also the clip ceiling
    mean: float = 512.0  # lognormal: mean of the distribution in tokens
    sigma: float = 0.5  # lognormal: sigma of the underlying normal
    path: str = ""  # empirical: CSV file (relative paths resolve against data_dir)
    column: str = ""  # empirical: column holding lengths


@dataclass
class PrefixConfig:
    """Prefix sharing for synthetic workloads (block hashes in units of block_tokens)."""

    block_tokens: int = 512
    num_system_prompts: int = 0  # distinct shared system prompts (0 = none)
    system_prompt_tokens: int = 0
    session_turns: int = 1  # >1: multi-turn sessions; each turn extends the previous context
    think_time_s: float = 0.0  # mean gap between turns of one session (exponential)
    # >0: requests draw their whole prompt from this many distinct prompts, in shuffled passes
    # (each pass a new permutation), as AIPerf's synthetic dataset does (100 entries by default,
    # --num-dataset-entries, sampling "shuffle"): a repeat is a prefix-cache hit of all but its
    # last token. 0: every prompt is new.
    prompt_pool: int = 0


@dataclass
class ScenarioConfig:
    """A workload. source: synthetic | mooncake | azure | lengths_csv | csv."""

    name: str = MISSING
    description: str = ""
    source: str = "synthetic"
    path: str = ""  # trace file for non-synthetic sources (relative -> data_dir)
    num_requests: int = 1000  # synthetic count; for traces, a limit (0 = all)
    rate_rps: float = 4.0  # synthetic arrival rate; for lengths_csv the Poisson rate
    arrival: str = "poisson"  # poisson | gamma (burstiness = arrival_cv)
    arrival_cv: float = 1.0
    input: LengthDist = field(default_factory=LengthDist)
    output: LengthDist = field(default_factory=lambda: LengthDist(value=128))
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    start_s: float = 0.0  # trace time window start (trace clock, seconds)
    end_s: float = 0.0  # window end; 0 = to the end
    speedup: float = 1.0  # divide inter-arrival gaps by this
    target_rate_rps: float = 0.0  # >0: rescale arrivals to this mean rate (overrides speedup)
    # closed loop (benchmark clients, docs/CLOSED_LOOP.md): >0 = this many clients, each sending
    # its next request when its previous one ends; arrival times then come from the loop, the
    # workload's order and lengths are kept
    concurrency: int = 0
    client_think_s: float = 0.0  # closed loop: a client's pause between a response and its next request
    duration_s: float = 0.0  # closed loop: no request is sent after this (0 = all num_requests)
    warmup_requests: int = -1  # closed loop: the first N sent are warm-up (-1 = concurrency)
    client_ramp_s: float = 0.0  # closed loop: client i sends its first request at i * ramp / C (0 = all at t=0)
    # closed loop: AIPerf's phases: the warm-up requests are sent, every one of them ends, then the
    # profiling phase starts with all C clients at once and every request of it is counted
    warmup_barrier: bool = False
