"""pdsim: discrete-event simulator of prefill/decode disaggregated LLM serving."""

from pdsim.compiled import select_core

select_core()  # compiled or pure-Python simulator core (pdsim/compiled.py), before either is imported
