"""Memory latency by pointer chasing: one program follows a random cycle through an int32 array,
each load's address coming from the previous load, so nothing overlaps and the time per hop is the
latency of one dependent load. Three rungs of the hierarchy, each timed where it lives:
- HBM: a 1 GiB cycle after an L2 flush (``do_bench`` flushes before every repetition);
- L2: a 4 MiB cycle, warm, loads marked ``.cg`` (cache in L2, not L1), timed without a flush;
- shared memory: a 4 KiB cycle copied into shared memory, then chased there (a few lines of PTX:
  Triton gives a kernel no way to address shared memory by hand)."""
import torch
import triton
import triton.language as tl

from ..lab import operands
from ..lab.errors import NoGPUError
from ..lab.mode import DEVICE, INTERPRET


@triton.jit
def chase_kernel(chain_ptr, out_ptr, start, steps, CACHE: tl.constexpr = ""):
    p = start
    for _ in range(steps):
        p = tl.load(chain_ptr + p, cache_modifier=CACHE)  # the next address is the value just loaded
    tl.store(out_ptr, p)


SMEM_SLOTS = 1024  # 4 KiB of int32: the ring declared in the PTX below


@triton.jit
def smem_chase_kernel(chain_ptr, out_ptr, steps):
    # Every thread runs the same walk on the same addresses: a warp reading one word is a broadcast,
    # so no bank conflict adds to the time.
    p = tl.inline_asm_elementwise(
        """{
        .shared .align 16 .b32 ring[1024];
        .reg .u32 i, v, a, base;
        .reg .u64 g;
        .reg .pred more;
        mov.u32 base, ring;
        mov.u32 i, 0;
        fill:                                  // copy the cycle into shared memory
        mul.wide.u32 g, i, 4;
        add.u64 g, g, $1;
        ld.global.u32 v, [g];
        mad.lo.u32 a, i, 4, base;
        st.shared.u32 [a], v;
        add.u32 i, i, 1;
        setp.lt.u32 more, i, 1024;
        @more bra fill;
        bar.warp.sync -1;
        mov.u32 $0, 0;
        mov.u32 i, 0;
        walk:                                  // then follow it: each address is the last value read
        mad.lo.u32 a, $0, 4, base;
        ld.shared.u32 $0, [a];
        add.u32 i, i, 1;
        setp.lt.u32 more, i, $2;
        @more bra walk;
        }""",
        "=r,l,r", [chain_ptr.to(tl.uint64, bitcast=True), steps], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(out_ptr, p)


def random_cycle(n, device=DEVICE):
    """int32 array whose entries form one cycle through all n slots in random order."""
    order = torch.randperm(n, device=device, dtype=torch.int32)
    chain = torch.empty(n, dtype=torch.int32, device=device)
    chain[order.long()] = order.roll(-1)
    return chain


def chase(chain, start, steps, cache="", out=None):
    """Follow ``steps`` hops from ``start``; returns the slot reached (a 1-element tensor, poisoned
    with -1 before the launch). ``cache=".cg"`` keeps the loads out of L1."""
    operands.check("chase", "chain", chain, layout="flat")
    out = torch.full((1,), -1, dtype=torch.int32, device=chain.device) if out is None else out.fill_(-1)
    chase_kernel[(1,)](chain, out, start, steps, CACHE=cache, num_warps=1)
    return out


def chase_shared(chain, steps, out=None):
    """The same walk from slot 0 in shared memory (``chain`` must hold SMEM_SLOTS entries); GPU only:
    the interpreter cannot run inline PTX."""
    operands.check("chase_shared", "chain", chain, layout="flat")
    if INTERPRET:
        raise NoGPUError("chase_shared: the shared-memory walk is inline PTX, which Triton's interpreter cannot "
                         "run; without a GPU the lesson shows its compiled code and the recorded times")
    if chain.numel() != SMEM_SLOTS:
        raise ValueError(f"chase_shared: the shared-memory ring holds {SMEM_SLOTS} slots, chain has {chain.numel()}")
    out = torch.full((1,), -1, dtype=torch.int32, device=chain.device) if out is None else out.fill_(-1)
    smem_chase_kernel[(1,)](chain, out, steps, num_warps=1)
    return out


def chase_reference(chain, start, steps):
    c = chain.cpu().tolist()
    for _ in range(steps):
        start = c[start]
    return start


def ns_per_hop(level, footprint_bytes, steps):
    """Median nanoseconds per dependent load of one walk of ``steps`` hops.

    ``level``: "HBM" times each walk after an L2 flush (``do_bench``); "L2" and "shared" time warm
    walks replayed back to back from a CUDA graph (``do_bench_cudagraph``: no flush, no launch gaps).
    "L2 flushed" is the L2-sized walk timed the HBM way: the trap of timing a cache through a harness
    that empties it before every repetition."""
    from ..lab.bench import graph_ms, median_ms
    chain = random_cycle(footprint_bytes // 4)
    out = torch.empty(1, dtype=torch.int32, device=chain.device)
    walk = {"HBM": lambda: chase(chain, 0, steps, out=out),
            "L2 flushed": lambda: chase(chain, 0, steps, out=out),
            "L2": lambda: chase(chain, 0, steps, cache=".cg", out=out),
            "shared": lambda: chase_shared(chain, steps, out=out)}[level]
    walk()  # compile, touch the pages, and check the walk before timing it
    assert out.item() == chase_reference(chain, 0, steps), f"the {level} walk ended on the wrong slot"
    ms = median_ms(walk, warmup=50, rep=300) if level in ("HBM", "L2 flushed") else graph_ms(walk)
    return ms * 1e6 / steps
