"""The perf models' hot paths, compiled with the simulator core (setup.py): decode.py (a decode
step as a function of the context, a span's steps in one loop) and prefill.py (a prefill step over
a batch). Each perf model builds its own from plain numbers (`decode_step`, `prefill_timer`:
pdsim/perf/base.py); nothing here imports the models."""
