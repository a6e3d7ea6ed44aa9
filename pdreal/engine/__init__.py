"""Engine loops: prefill (bootstrap -> waiting -> forward -> inflight), decode
(prealloc -> transfer -> waiting -> running), colocated (waiting -> running, no KV transfer),
plus a single-process reference generate."""
