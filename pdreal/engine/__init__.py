"""Engine loops: prefill (bootstrap -> waiting -> forward -> inflight) and decode
(prealloc -> transfer -> waiting -> running), plus a single-process reference generate."""
