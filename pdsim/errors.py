"""One-line error messages for command-line tools (pdsim's and pdreal's CLIs).

A user-facing failure is one line naming the file, field and value; exceptions from hydra and
OmegaConf span several lines (the available options, the search path) and chain a cause. This
module folds them into that one line.
"""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """`exc` as one line: its first line, hydra's list of available options folded in, and the
    first line of its cause."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    message = lines[0] if lines else type(exc).__name__
    for i, line in enumerate(lines):
        if line.startswith("Available options"):
            options = []
            for option in lines[i + 1 :]:
                if option.startswith("Config search path"):
                    break
                if not option.startswith("base_"):
                    options.append(option)
            message += " (available: " + ", ".join(options) + ")"
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        message += ": " + str(cause).strip().splitlines()[0]
    return message
