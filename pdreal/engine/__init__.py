"""Engine loops: prefill (bootstrap -> waiting -> forward -> inflight), decode
(prealloc -> transfer -> waiting -> running), colocated (waiting -> running, no KV transfer),
plus a single-process reference generate. Every scheduling decision comes from one
pdsim.policy planner call per step (the same call pdsim's instance makes); these loops execute
the plan with torch forwards and KV transfers (tests/lockstep proves the two agree)."""
