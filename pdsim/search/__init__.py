"""Searches over configurations: goodput bisection, sweeps, placement planning."""
