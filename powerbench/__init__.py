"""powerbench: a benchmarking framework for activation-sparse LLM inference."""

import os

# Idle OpenMP workers (torch's) sleep instead of spinning. Our C++ operators run on their
# own thread pool between torch's ops; with libgomp's default spin-wait, torch's idle
# workers kept the cores busy while our workers needed them: OPT-1.3B-shaped fp16 decode
# on 2 cores ran at 16.7 tok/s, 21.1 with PASSIVE (`powerbench validate`, 2026-11-23).
# libgomp reads it when torch loads, so it must be set before; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
