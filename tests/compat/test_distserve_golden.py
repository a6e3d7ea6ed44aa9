"""compat=distserve against numbers DistServe's own simulator produced (golden file, its header
names the command). 120 ShareGPT requests per slice, OPT-13B on its A100 profiles; colocated
(its vLLM backend, TP1) and disaggregated (prefill TP2 + decode TP1) at 0.2 and 0.5 req/s.

Per request, TTFT (prefill end - arrival) and TPOT ((finish - prefill end) / output tokens) agree
to float precision, except in colocated 0.5 req/s: there simdistserve's decode batch at times hits
its fixed 50,000 context-token cap (docs/VALIDATION.md; with the cap lifted that slice agrees to
float precision too), which pdsim does not model; medians and attainment still agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from pdsim import metrics
from pdsim.config import register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.sim import simulate
from pdsim.workload import build_workload

GOLDEN = Path(__file__).with_name("simdistserve_golden.csv")
PLACEMENTS = {
    "colocated": ["cluster.mode=colocated", "cluster.colocated=1", "cluster.colocated_tp=1",
                  "perf.path=calibration/distserve_profiler-a100-80g.vllm.json"],
    "disaggregated": ["cluster=1p1d", "cluster.prefill_tp=2", "cluster.decode_tp=1"],
}


def simulate_slice(requests: pd.DataFrame, placement: str, tmp_path: Path, data_dir: Path) -> pd.DataFrame:
    path = tmp_path / "workload.csv"
    requests[["arrival_s", "input_tokens", "output_tokens"]].to_csv(path, index=False)
    register_configs()
    overrides = ["compat=distserve", "model=opt_13b", "hardware=a100_80g", "scenario=sharegpt",
                 "scenario.source=csv", f"scenario.path={path}", "scenario.num_requests=0",
                 "progress=false", f"data_dir={data_dir}", *PLACEMENTS[placement]]
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=overrides))
    trace = simulate(cfg, build_workload(cfg.scenario, cfg.seed, cfg.data_dir)).trace.sort_values("request_id")
    return pd.DataFrame({"ttft_ms": 1e3 * metrics.ttft_s(trace, "prefill_end").to_numpy(),
                         "tpot_ms": 1e3 * metrics.tpot_s(trace, "distserve").to_numpy()})


@pytest.mark.parametrize(("placement", "rate_rps"),
                         [("colocated", 0.2), ("colocated", 0.5), ("disaggregated", 0.2), ("disaggregated", 0.5)])
def test_matches_simdistserve(placement: str, rate_rps: float, tmp_path: Path, data_dir: Path) -> None:
    golden = pd.read_csv(GOLDEN, comment="#")
    theirs = golden[(golden["placement"] == placement) & np.isclose(golden["rate_rps"], rate_rps)]
    assert len(theirs) == 120
    ours = simulate_slice(theirs, placement, tmp_path, data_dir)
    if (placement, rate_rps) == ("colocated", 0.5):  # simdistserve's decode-batch cap binds at times
        for col in ("ttft_ms", "tpot_ms"):
            rel = np.abs(ours[col].to_numpy() / theirs[col].to_numpy() - 1)
            assert np.median(rel) < 1e-9 and rel.max() < 0.5
            assert np.percentile(ours[col], 50) == pytest.approx(np.percentile(theirs[col], 50), rel=1e-3)
        both = [((df["ttft_ms"] <= 1000) & (df["tpot_ms"] <= 100)).mean() for df in (ours, theirs)]
        assert abs(both[0] - both[1]) <= 0.01
        return
    np.testing.assert_allclose(ours["ttft_ms"], theirs["ttft_ms"], rtol=1e-9)
    np.testing.assert_allclose(ours["tpot_ms"], theirs["tpot_ms"], rtol=1e-9)
