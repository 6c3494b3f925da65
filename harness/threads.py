"""Start the parallel runtimes' worker threads before a job's address space is capped.

torch and numba run their parallel loops on an OpenMP runtime (GNU libgomp), faiss on its own copy
of it; each creates its worker threads at its first parallel region. Under the memory guard's
address-space cap (:func:`harness.cost.memory_guard`) a thread created late, when the job is near
the cap, cannot map its stack, and libgomp then ends the process itself ("libgomp: Thread creation
failed: Resource temporarily unavailable"), so the job dies without the guard's one-line memory
error. The rehearsal's VDR train job died so at its second step, where the in-training retrieval
(numba) first ran. :func:`start_pools` runs one small parallel loop on each runtime first, with as
many threads as the machine has cores, so that the job's own loops reuse threads that exist.
"""
from __future__ import annotations

import os

import numba


@numba.njit(parallel=True, cache=True)
def _sum(a):  # a numba prange loop: its first call starts numba's OpenMP workers
    total = 0.0
    for i in numba.prange(a.shape[0]):
        total += a[i]
    return total


def start_pools() -> None:
    """Run one parallel loop on torch's, numba's and faiss's thread pools (all three are
    dependencies of the package) with all the machine's cores, leaving each runtime's thread count
    as it was."""
    import faiss
    import numpy as np
    import torch

    cores = os.cpu_count() or 1
    before = torch.get_num_threads()
    torch.set_num_threads(max(cores, before))
    torch.zeros(1 << 20).add_(1)  # above torch's grain size: runs on every intra-op thread
    torch.set_num_threads(before)
    _sum(np.ones(1024))
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(max(cores, before))
    x = np.zeros((64, 8), np.float32)
    index = faiss.IndexFlatIP(8)
    index.add(x)
    index.search(x, 1)
    faiss.omp_set_num_threads(before)
