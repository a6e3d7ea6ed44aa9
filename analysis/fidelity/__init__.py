"""Sim-to-real fidelity: profile the real engine, replay a workload against it, simulate the
same requests with the measured engine facts, compare (`pdsim fidelity`, docs/FIDELITY.md).

Modules: facts.py (engine.json + probe -> pdsim overrides), real.py (drive pdreal: profile,
serve, probe, replay), loop.py (the whole loop), compare.py (the error table and its
definitions), cli.py (the command). pdreal and torch are imported only when the loop runs.
"""

from analysis.fidelity.compare import DEFINITIONS, TARGETS, error_table, format_table
from analysis.fidelity.facts import EngineFacts, sim_overrides

__all__ = ["DEFINITIONS", "TARGETS", "EngineFacts", "error_table", "format_table", "sim_overrides"]
