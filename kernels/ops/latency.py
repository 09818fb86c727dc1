"""Memory latency by pointer chasing: one program follows a random cycle through an int32 array,
each load's address coming from the previous load, so nothing overlaps and the time per hop is the
latency of one dependent load. A footprint far beyond L2 measures HBM (random lines, TLB effects
included); a few MiB measures L2."""
import torch
import triton
import triton.language as tl

from ..lab import operands
from ..lab.mode import DEVICE


@triton.jit
def chase_kernel(chain_ptr, out_ptr, start, steps):
    p = start
    for _ in range(steps):
        p = tl.load(chain_ptr + p)  # the next address is the value just loaded
    tl.store(out_ptr, p)


def random_cycle(n, device=DEVICE):
    """int32 array whose entries form one cycle through all n slots in random order."""
    order = torch.randperm(n, device=device, dtype=torch.int32)
    chain = torch.empty(n, dtype=torch.int32, device=device)
    chain[order.long()] = order.roll(-1)
    return chain


def chase(chain, start, steps):
    """Follow ``steps`` hops from ``start``; returns the slot reached (a 1-element tensor)."""
    operands.check("chase", "chain", chain, layout="flat")
    out = torch.full((1,), -1, dtype=torch.int32, device=chain.device)
    chase_kernel[(1,)](chain, out, start, steps, num_warps=1)
    return out


def chase_reference(chain, start, steps):
    c = chain.cpu().tolist()
    for _ in range(steps):
        start = c[start]
    return start


def ns_per_hop(footprint_bytes, steps=20_000):
    """Median nanoseconds per dependent load over a random cycle of ``footprint_bytes``."""
    from ..lab.bench import median_ms
    chain = random_cycle(footprint_bytes // 4)
    chase(chain, 0, steps)  # compile and touch the pages before timing
    return median_ms(lambda: chase(chain, 0, steps), warmup=50, rep=300) * 1e6 / steps
