"""Trace analysis: comparison, run and sweep reports over pdsim/pdreal per-request traces.

Modules: `load` (read traces, align two runs), `stages` (per-request metrics), `compare` and
`diverge` (numbers), `plots` / `timeline` / `sweep` (figures), `html` (rendering and writing),
`sections` / `run_doc` (report layout), `report` (entry points: `main`, `write_run_report`,
`write_comparison_report`, `write_sweep_report`), and `fidelity/` (the sim-vs-real loop behind
`pdsim fidelity`: it drives pdreal and pdsim, so it lives above both). `pdsim report` and
`pdsim fidelity` reach this package through entry points (pdsim/plugins.py). Importing this
package does not import matplotlib.
"""
