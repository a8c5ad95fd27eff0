"""Test-session settings shared by every test module.

Under pytest-xdist (``-n 2``) each worker keeps one torch thread, and so do
the processes it starts (notebook kernels, Ray actors, sphinx): two workers
with two threads each on a 2-core machine oversubscribe it, and OpenMP's
spinning made some tests 10-20x slower than in one process.
"""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
