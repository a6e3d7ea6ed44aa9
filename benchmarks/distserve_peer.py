"""How the benchmarks run DistServe's simulator (simdistserve): its placements and its driver.

Kept apart from the benchmarks that use it and free of heavy imports, so a timing parent that
imports it stays small (a child's peak RSS includes its parent's at fork).
"""

PLACEMENTS = {
    # name: (simdistserve backend, tp prefill, tp decode, pdsim overrides)
    "colocated": ("vllm", "1", "0", ["cluster.mode=colocated", "cluster.colocated=1", "cluster.colocated_tp=1",
                                     "perf.path=calibration/distserve_profiler-a100-80g.vllm.json"]),
    "disaggregated": ("distserve", "2", "1", ["cluster=1p1d", "cluster.prefill_tp=2", "cluster.decode_tp=1"]),
}
PEER_RUNNER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from simdistserve.benchmarks.simulate_dist import parse_args, main
wl, backend, tpp, tpd, out = sys.argv[2:7]
n = len(json.load(open(wl)))
main(parse_args(["--backend", backend, "--model", "facebook/opt-13b", "--workload", wl, "--arrival", "custom",
                 "--N", str(n), "--tp-prefill", tpp, "--tp-decode", tpd, "--rate", "1",
                 "--output-request-latency", out, "--slas", "[]", "--slo-scales", "[1]"]))
"""
