"""Synthetic workloads: arrivals, lengths, shared system prompts and multi-turn sessions.

Prefix sharing is expressed the way the Mooncake trace does it: each prompt carries the hashes
of its `block_tokens`-sized blocks. A session's token stream is
`system prompt + user_1 + answer_1 + user_2 + answer_2 + ...`; turn k's prompt is the stream up
to and including user_k, so it shares every full block with turn k-1's prompt and answer.
Blocks lying wholly inside a system prompt carry that prompt's ids (shared across sessions);
every other full block gets a session-specific id; a partial last block gets a fresh id (its
content differs from the full block it will become).

`rate_rps` is the *request* rate offered, sessions or not: sessions start at rate_rps / turns, and
the workload is a window of a stationary process, so every moment of it sees the request rate of
steady state. Sessions begin up to `SESSION_LEAD_THINKS` mean think times per later turn before
the window opens; their turns before it are not issued (the window starts with a cold cache, as a
window cut from a trace does), and the window holds the first num_requests requests from time 0.

`prefix.prompt_pool=N` replaces sessions and system prompts by a pool of N whole prompts (each
with its own length and block ids) drawn in shuffled passes, as a benchmark client with a fixed
dataset sends them (AIPerf: 100 synthetic entries, sampled without replacement, reshuffled after
each pass; its warm-up draws from the same sampler). Output lengths stay per request.
"""

from __future__ import annotations

import numpy as np

from pdsim.config import ScenarioConfig
from pdsim.rng import stream
from pdsim.workload.distributions import arrival_times_s, sample_lengths
from pdsim.workload.errors import WorkloadError
from pdsim.workload.request import Workload, make_workload

# sessions start this many mean think times per later turn before the window (the share of
# sessions longer than that is below 1%: a Gamma(turns - 1) tail)
SESSION_LEAD_THINKS = 4.0


class _BlockIds:
    """Hands out block ids: system prompt blocks first, then a counter for everything else."""

    def __init__(self, num_system_prompts: int, system_blocks: int) -> None:
        self.system_blocks = system_blocks
        self._next = num_system_prompts * system_blocks

    def system(self, prompt: int, block: int) -> int:
        return prompt * self.system_blocks + block

    def fresh(self) -> int:
        self._next += 1
        return self._next - 1


def generate_synthetic(cfg: ScenarioConfig, seed: int, data_dir: str = "") -> Workload:
    """The synthetic workload described by `cfg` (deterministic for a given seed)."""
    where = f"scenario {cfg.name}"
    n = cfg.num_requests
    if n < 1:
        raise WorkloadError(where, "num_requests", f"must be >= 1, got {n}")
    prefix = cfg.prefix
    if prefix.block_tokens < 1:
        raise WorkloadError(where, "prefix.block_tokens", f"must be >= 1, got {prefix.block_tokens}")
    if prefix.session_turns < 1:
        raise WorkloadError(where, "prefix.session_turns", f"must be >= 1, got {prefix.session_turns}")
    if prefix.prompt_pool < 0:
        raise WorkloadError(where, "prefix.prompt_pool", f"must be >= 0, got {prefix.prompt_pool}")
    if prefix.prompt_pool > 0:
        return _pooled(cfg, seed, data_dir)
    turns = prefix.session_turns
    lead_s = SESSION_LEAD_THINKS * (turns - 1) * max(prefix.think_time_s, 0.0)
    # sessions over the lead plus the window, with a margin for the arrival process's spread
    num_sessions = -(-n // turns)
    if lead_s > 0:  # enough to cover the window's end whatever the arrival process's spread
        expected = lead_s * cfg.rate_rps / turns + n / turns
        num_sessions = int(np.ceil(1.1 * expected + 3 * np.sqrt(expected) * max(cfg.arrival_cv, 1.0))) + 4 * turns
    starts = arrival_times_s(
        num_sessions, cfg.rate_rps / turns, cfg.arrival, cfg.arrival_cv, stream(seed, "arrivals"), where
    ) - lead_s
    user = sample_lengths(cfg.input, num_sessions * turns, stream(seed, "input_tokens"), f"{where}.input", data_dir)
    out = sample_lengths(cfg.output, num_sessions * turns, stream(seed, "output_tokens"), f"{where}.output", data_dir)
    think = stream(seed, "think_time").exponential(max(prefix.think_time_s, 0.0), size=num_sessions * turns)
    sys_choice = stream(seed, "system_prompt").integers(0, max(prefix.num_system_prompts, 1), size=num_sessions)
    rows = _session_rows(cfg, starts, user, out, think, sys_choice)
    rows = [r for r in rows if r[0] >= 0.0] if lead_s > 0 else rows
    rows.sort(key=lambda r: (r[0], r[4]))  # by arrival, ties by (session, turn) order
    if len(rows) < n:
        raise WorkloadError(where, "num_requests", f"only {len(rows)} of {n} session turns fell in the window")
    rows = rows[:n]
    return make_workload(
        cfg.name,
        arrival_s=np.array([r[0] for r in rows]),
        input_tokens=np.array([r[1] for r in rows], dtype=np.int64),
        output_tokens=np.array([r[2] for r in rows], dtype=np.int64),
        session_id=np.array([r[3] for r in rows], dtype=np.int64),
        hash_lists=[r[5] for r in rows],
        block_tokens=prefix.block_tokens,
    )


def _session_rows(
    cfg: ScenarioConfig,
    starts: np.ndarray,
    user: np.ndarray,
    out: np.ndarray,
    think: np.ndarray,
    sys_choice: np.ndarray,
) -> list[tuple[float, int, int, int, int, np.ndarray]]:
    prefix = cfg.prefix
    block = prefix.block_tokens
    sys_tokens = prefix.system_prompt_tokens if prefix.num_system_prompts > 0 else 0
    ids = _BlockIds(prefix.num_system_prompts, sys_tokens // block)
    turns = prefix.session_turns
    rows = []
    for s, start_s in enumerate(starts.tolist()):
        stream_ids: list[int] = [ids.system(int(sys_choice[s]), b) for b in range(sys_tokens // block)]
        context, t = sys_tokens, start_s
        for k in range(turns):
            i = s * turns + k
            if k > 0:
                t += float(think[i])
            prompt = context + int(user[i])
            while len(stream_ids) < prompt // block:
                stream_ids.append(ids.fresh())
            hashes = stream_ids[: prompt // block]
            if prompt % block:
                hashes = hashes + [ids.fresh()]
            rows.append((t, prompt, int(out[i]), s, i, np.asarray(hashes, dtype=np.int64)))
            context = prompt + int(out[i])
    return rows


def _pooled(cfg: ScenarioConfig, seed: int, data_dir: str) -> Workload:
    """Requests whose prompts come from a pool of `prefix.prompt_pool` prompts in shuffled passes."""
    where = f"scenario {cfg.name}"
    prefix, n, pool = cfg.prefix, cfg.num_requests, cfg.prefix.prompt_pool
    if prefix.session_turns != 1 or prefix.num_system_prompts > 0:
        raise WorkloadError(where, "prefix.prompt_pool", f"{pool} needs session_turns=1 and no system prompts "
                            f"(got session_turns={prefix.session_turns}, num_system_prompts={prefix.num_system_prompts})")
    lengths = sample_lengths(cfg.input, pool, stream(seed, "prompt_pool_lengths"), f"{where}.input", data_dir)
    block, ids = prefix.block_tokens, _BlockIds(0, 0)
    hashes = [np.asarray([ids.fresh() for _ in range(-(-int(tokens) // block))], dtype=np.int64) for tokens in lengths]
    draw = stream(seed, "prompt_pool")
    order = np.concatenate([draw.permutation(pool) for _ in range(-(-n // pool))])[:n]
    arrivals = arrival_times_s(n, cfg.rate_rps, cfg.arrival, cfg.arrival_cv, stream(seed, "arrivals"), where)
    out = sample_lengths(cfg.output, n, stream(seed, "output_tokens"), f"{where}.output", data_dir)
    return make_workload(
        cfg.name,
        arrival_s=np.asarray(arrivals, dtype=float),
        input_tokens=np.asarray(lengths, dtype=np.int64)[order],
        output_tokens=np.asarray(out, dtype=np.int64),
        session_id=np.arange(n, dtype=np.int64),
        hash_lists=[hashes[int(j)] for j in order],
        block_tokens=block,
    )
