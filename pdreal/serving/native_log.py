"""Filter known-harmless lines that native libraries write straight to file descriptor 2.

Mooncake's transfer engine logs through glog to stderr, bypassing Python's logging. At start-up
in P2PHANDSHAKE mode it prints `E... transfer_metadata.cpp] Local segment descriptor not found`
once per process: it looks up its own segment before that segment has been published, then
publishes it, and every transfer afterwards finds it (the KV-transfer tests pass right after the
line). `filtered_stderr` captures fd 2 while a block runs and writes back every line except
those matching the given patterns, so real errors still show.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

MOONCAKE_HARMLESS = (re.compile(r"Local segment descriptor not found"),
                     re.compile(r"^WARNING: Logging before InitGoogleLogging\(\) is written to STDERR"))


@contextlib.contextmanager
def filtered_stderr(patterns: tuple[re.Pattern[str], ...] = MOONCAKE_HARMLESS) -> Iterator[None]:
    """Run the block with fd 2 captured; afterwards re-emit the lines that match no pattern."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            for line in capture.read().decode(errors="replace").splitlines(keepends=True):
                if not any(p.search(line) for p in patterns):
                    sys.stderr.write(line)
            sys.stderr.flush()
