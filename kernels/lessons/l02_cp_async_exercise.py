"""The check behind exercises/02_cp_async.ipynb: the pointer GEMM's K loop, right on ragged shapes
and pipelined into cp.async at three stages."""
import random

from ..lab import check as lab_check
from ..ops import gemm


def check(matmul, kernel):
    """``matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, stages, out=None)`` launches ``kernel`` (args as gemm.matmul_kernel)
    into ``out`` (a new tensor when None)."""
    rng = random.Random()

    def values():
        lab_check.gemm_values(matmul, [(rng.randint(65, 300), rng.randint(65, 300), rng.randint(65, 300)) for _ in range(3)],
                     32, 32, 32, 2)
        return "within 1e-2 of torch on three ragged shapes"

    def code():
        compiled = lab_check.require_dot(gemm.compile_sm90(kernel, 128, 128, 64, 3, shape=(4096, 4096, 4096)))
        counts = compiled.counts()
        lab_check.require(compiled, "cp.async", "at 3 stages the loads feeding tl.dot should become asynchronous "
                      "copies; they do when the loop's loads go straight into tl.dot and the pointers advance by a "
                      "loop-invariant step")
        return (f"{counts['cp.async']} cp.async and {counts['cp.async.wait_group']} cp.async.wait_group "
                f"at 3 stages")

    return lab_check.run("exercise 02", [("matmul: values", values), ("matmul: cp.async at 3 stages", code)])
