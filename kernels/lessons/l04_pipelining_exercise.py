"""The check behind exercises/04_pipelining.ipynb: a persistent TMA GEMM that walks every tile with
fewer programs than tiles, its loads pipelined into a ring."""
import random

from ..lab import check as lab_check, smem
from ..ops import gemm


def check(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs, out=None)`` launches ``kernel`` (args as
    gemm.matmul_kernel) on ``programs`` programs into ``out``; the programs must walk all the tiles."""
    rng = random.Random()

    def values():  # more tiles than programs: only a persistent loop covers them all
        lab_check.gemm_values(matmul, [(rng.randint(130, 300), 8 * rng.randint(17, 40), 8 * rng.randint(9, 40))
                              for _ in range(3)], 64, 64, 32, 2, programs=3)
        return "within 1e-2 of torch on three ragged shapes, 3 programs walking all the tiles"

    def code():
        compiled = lab_check.require_dot(gemm.compile_sm90(kernel, 128, 128, 64, 3, shape=(4096, 4096, 4096)))
        if not compiled.counts()["cp.async.bulk.tensor load"]:
            raise AssertionError("no cp.async.bulk.tensor loads: keep the tiles coming through the descriptors")
        stage = smem.gemm_stage_bytes(128, 128, 64)
        if compiled.shared < 2 * stage:
            raise AssertionError(f"the kernel asks {compiled.shared} B of shared memory, less than two stages "
                                 f"({2 * stage} B): the loads are not pipelined; keep the K loop a plain loop "
                                 "over descriptor loads feeding tl.dot, so the stage count can build the ring")
        return (f"{compiled.shared // 1024} KiB of shared memory at 3 stages, more than two "
                f"{stage // 1024} KiB stages of A and B tiles: the ring is there")

    return lab_check.run("exercise 04", [("persistent GEMM: values", values), ("pipelined: the ring in the code", code)])
