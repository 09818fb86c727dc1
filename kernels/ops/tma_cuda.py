"""TMA by hand in CUDA C++ (lesson 06): the copy lesson 03 let Triton write, written instruction by instruction.

- ``copy_tile``: one CTA per tile. The tensor maps are encoded on the host (``cuTensorMapEncodeTiled``) and
  passed as ``__grid_constant__`` parameters; one elected thread arms an mbarrier with the tile's bytes, issues
  the TMA load, waits for the phase, and stores the tile back with a TMA store.
- ``ring``: a persistent grid (``ctas_per_sm`` CTAs per SM) walking the tiles through an S-slot ring in shared
  memory, one "full" mbarrier per slot, the phase bit flipping each time the ring wraps; the TMA store of tile k
  is in flight while the load of the next tiles is.
- ``wrong_count``: the one-tile copy armed with a wrong byte count, waited for with a bounded wait (a budget on
  ``%globaltimer``) that reports a timeout instead of hanging the GPU.
- ``compiled()``: the same CUDA compiled with nvcc for sm_90a anywhere (PTX, cubin, SASS); ``side_by_side``
  puts each protocol line of it beside the line Triton emitted for lesson 03's copy (``PTX_MAP``).

Each inline-PTX helper names the PTX ISA section its instruction comes from (NVIDIA, Parallel Thread
Execution ISA, "Parallel Synchronization and Communication Instructions" and "Data Movement and Conversion
Instructions"). The tensor map's rules are ``kernels.lab.tma_rules``; the host encoding follows the CUDA
Driver API, ``cuTensorMapEncodeTiled``. The barrier helpers and the encoding are shared with lesson 06's other
extensions (``kernels.lab.cuda``: ``TMA_DEVICE``, ``TENSOR_MAP_HOST``).
"""
from dataclasses import dataclass

import torch

from ..lab import cuda, isa, operands, smem, tma_rules
from ..lab.errors import ArgumentError, CourseError, TMAError
from ..lab.mode import DEVICE, sm_count

# ---- the kernels: plain CUDA and inline PTX, compiled alone by cuda.compile_sm90a -------------------------

KERNELS = r"""
#include <cuda.h>      // CUtensorMap: the 128-byte, 64-byte aligned tensor map the host encodes
#include <cstdint>

namespace tma {
""" + cuda.TMA_DEVICE + r"""
// PTX ISA, cp.async.bulk.tensor (global -> shared): the box at (x, y) = (column, row) of the map; the TMA
// unit reports every byte that lands to the barrier (complete_tx::bytes). Nothing passes through registers.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}

// PTX ISA, elect.sync: the hardware picks one lane of the warp. A TMA copy is one instruction per
// tile, issued by one thread; the other 31 lanes have nothing to do and leave.
__device__ __forceinline__ bool elect_one() {
  uint32_t leader;
  asm volatile("{\n\t.reg .pred p;\n\telect.sync _|p, 0xffffffff;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(leader));
  return leader;
}

// PTX ISA, Special Registers (%globaltimer): nanoseconds, the same clock for every SM.
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// A wait with a budget: a barrier whose phase never completes (a wrong byte count, a lost copy) would
// spin forever and hold the GPU; this one gives up after `budget_ns` and says so. The timer is read only
// once the first try has failed, so a wait that succeeds at once costs one try_wait.
__device__ __forceinline__ bool mbar_wait_bounded(uint32_t bar, uint32_t phase, uint64_t budget_ns) {
  if (mbar_try_wait(bar, phase)) return true;
  const uint64_t start = globaltimer();
  while (!mbar_try_wait(bar, phase))
    if (globaltimer() - start > budget_ns) return false;
  return true;
}

// PTX ISA, membar/fence (fence.proxy.async): orders this thread's view of shared memory with the async
// proxy's, the one TMA reads through. Needed when threads wrote the tile with ordinary stores; here the
// tile was written by TMA itself, and the fence (as in Triton's copy) costs next to nothing.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// PTX ISA, cp.async.bulk.tensor (shared -> global): TMA clips the box at the tensor's edges.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int x, int y, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(src) : "memory");
}

// PTX ISA, cp.async.bulk.commit_group: the stores issued so far become one bulk group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// PTX ISA, cp.async.bulk.wait_group (.read): wait until at most N groups are still READING shared memory
// (their writes to global may still be on the way): the moment a slot may be overwritten.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Dynamic shared memory: up to 8 barriers (8 bytes each) first, then the slots, aligned for the 128-byte
// swizzle, whose pattern repeats every 1024 bytes (the unswizzled case needs 128). The host allocates
// 64 + 1023 bytes of slack for this (_ALIGN in the Python module).
__device__ __forceinline__ uint32_t slots_base(const void* dynamic_smem) {
  return (smem_u32(dynamic_smem) + 64u + 1023u) & ~1023u;
}

// The ring: STAGES slots of one tile each, one "full" barrier per slot. No "empty" barrier: the only
// reader of a slot is a TMA store issued by this same thread, so bulk_wait_read says when it is free.
template <int STAGES>
__device__ __forceinline__ void ring(const CUtensorMap* in, const CUtensorMap* out, int tiles_m, int tiles_n,
                                     int box_m, int box_n, uint32_t slot_bytes, uint64_t budget_ns, int* timeouts) {
  static_assert(STAGES >= 2, "one slot's store must be in flight while another slot loads");
  extern __shared__ uint8_t dynamic_smem[];
  static_assert(STAGES <= 8, "the barriers' 64 bytes hold 8");
  const uint32_t full = smem_u32(dynamic_smem);  // barrier s at full + 8 * s
  const uint32_t slots = slots_base(dynamic_smem);  // slot s at slots + s * slot_bytes
  if (!elect_one()) return;

  const int tiles = tiles_m * tiles_n;
  if (static_cast<int>(blockIdx.x) >= tiles) return;
  const int mine = (tiles - 1 - blockIdx.x) / gridDim.x + 1;  // this CTA's tiles: blockIdx.x, + gridDim.x, ...
  auto at = [&](int k, int& x, int& y) {
    const int t = blockIdx.x + k * gridDim.x;
    x = (t % tiles_n) * box_n;
    y = (t / tiles_n) * box_m;
  };
  auto load = [&](int k, int s) {  // tile k of this CTA into slot s
    int x, y;
    at(k, x, y);
    mbar_arrive_expect_tx(full + 8 * s, slot_bytes);
    tma_load_2d(slots + s * slot_bytes, in, x, y, full + 8 * s);
  };

  for (int s = 0; s < STAGES; ++s) mbar_init(full + 8 * s, 1);  // one arrival per phase: the expect_tx
  fence_mbarrier_init();
  for (int k = 0; k < STAGES && k < mine; ++k) load(k, k);  // fill the ring

  int slot = 0;
  uint32_t phase = 0;  // the parity of the phase every barrier of this round completes
  for (int k = 0; k < mine; ++k) {
    if (!mbar_wait_bounded(full + 8 * slot, phase, budget_ns)) {  // give up and say so, but only once the
      atomicAdd(timeouts, 1);                                      // stores issued have read their slots
      bulk_wait_read<0>();
      return;
    }
    fence_proxy_async();
    int x, y;
    at(k, x, y);
    tma_store_2d(out, x, y, slots + slot * slot_bytes);
    bulk_commit();
    // Refill the slot of the PREVIOUS tile, once its store has read it: this tile's store stays in flight
    // while the next load goes out (waiting for this store instead would serialise store and load).
    const int prev = slot == 0 ? STAGES - 1 : slot - 1;
    if (k >= 1 && k - 1 + STAGES < mine) {
      bulk_wait_read<1>();
      load(k - 1 + STAGES, prev);
    }
    if (++slot == STAGES) {  // the ring wrapped: every barrier's next phase is the other parity
      slot = 0;
      phase ^= 1;
    }
  }
  bulk_wait_read<0>();  // shared memory must outlive the last stores' reads
}

}  // namespace tma

// One CTA per tile. expect_bytes is the tile's bytes (the wrong-count demonstration passes another).
extern "C" __global__ void __launch_bounds__(32)
tma_copy_tile(const __grid_constant__ CUtensorMap in, const __grid_constant__ CUtensorMap out, int tiles_n,
              int box_m, int box_n, uint32_t expect_bytes, uint64_t budget_ns, int* timeouts) {
  using namespace tma;
  extern __shared__ uint8_t dynamic_smem[];
  if (!elect_one()) return;
  const uint32_t full = smem_u32(dynamic_smem), tile = slots_base(dynamic_smem);
  const int x = (blockIdx.x % tiles_n) * box_n, y = (blockIdx.x / tiles_n) * box_m;

  mbar_init(full, 1);
  fence_mbarrier_init();
  mbar_arrive_expect_tx(full, expect_bytes);
  tma_load_2d(tile, &in, x, y, full);
  if (!mbar_wait_bounded(full, 0, budget_ns)) {  // phase 0: the barrier's first (and only) round
    atomicAdd(timeouts, 1);
    return;
  }
  fence_proxy_async();
  tma_store_2d(&out, x, y, tile);
  bulk_commit();
  bulk_wait_read<0>();
}

#define RING_ENTRY(S)                                                                                       \
  extern "C" __global__ void __launch_bounds__(32)                                                        \
  tma_ring_##S(const __grid_constant__ CUtensorMap in, const __grid_constant__ CUtensorMap out, int tiles_m, \
               int tiles_n, int box_m, int box_n, uint32_t slot_bytes, uint64_t budget_ns, int* timeouts) {   \
    tma::ring<S>(&in, &out, tiles_m, tiles_n, box_m, box_n, slot_bytes, budget_ns, timeouts);              \
  }
RING_ENTRY(2)
RING_ENTRY(3)
RING_ENTRY(4)
"""

# ---- the launchers: host code, compiled with the kernels by cuda.build on a GPU ---------------------------

LAUNCHERS = cuda.TENSOR_MAP_HOST + r"""
// The map of a copy's input or output: fp16, bf16 or fp32, swizzled by 128 bytes or not, L2 promotion of 256 bytes.
static CUtensorMap make_map(const torch::Tensor& t, int64_t box_m, int64_t box_n, bool swizzle128) {
  CUtensorMapDataType type;
  switch (t.scalar_type()) {
    case torch::kHalf: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case torch::kBFloat16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case torch::kFloat: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    default: TORCH_CHECK(false, "tma_cuda: fp16, bf16 or fp32 only");
  }
  return course_map_2d(t, box_m, box_n, type, swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

static void allow_smem(const void* kernel, int64_t bytes) {
  if (bytes > 48 * 1024)  // above 48 KB a kernel must opt in
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

void copy_tile(torch::Tensor x, torch::Tensor y, int64_t box_m, int64_t box_n, bool swizzle,
               int64_t expect_bytes, int64_t budget_ns, int64_t smem_bytes, torch::Tensor timeouts) {
  const c10::cuda::CUDAGuard guard(x.device());
  CUtensorMap in = make_map(x, box_m, box_n, swizzle), out = make_map(y, box_m, box_n, swizzle);
  const int tiles_m = (x.size(0) + box_m - 1) / box_m, tiles_n = (x.size(1) + box_n - 1) / box_n;
  allow_smem((const void*)tma_copy_tile, smem_bytes);
  tma_copy_tile<<<tiles_m * tiles_n, 32, smem_bytes, c10::cuda::getCurrentCUDAStream()>>>(
      in, out, tiles_n, box_m, box_n, (uint32_t)expect_bytes, (uint64_t)budget_ns, timeouts.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void ring(torch::Tensor x, torch::Tensor y, int64_t box_m, int64_t box_n, bool swizzle, int64_t stages,
          int64_t grid, int64_t budget_ns, int64_t smem_bytes, torch::Tensor timeouts) {
  const c10::cuda::CUDAGuard guard(x.device());
  CUtensorMap in = make_map(x, box_m, box_n, swizzle), out = make_map(y, box_m, box_n, swizzle);
  const int tiles_m = (x.size(0) + box_m - 1) / box_m, tiles_n = (x.size(1) + box_n - 1) / box_n;
  const uint32_t slot_bytes = box_m * box_n * x.element_size();
  auto kernel = stages == 2 ? tma_ring_2 : stages == 3 ? tma_ring_3 : tma_ring_4;
  TORCH_CHECK(stages >= 2 && stages <= 4, "tma_cuda.ring: stages 2, 3 or 4");
  allow_smem((const void*)kernel, smem_bytes);
  kernel<<<grid, 32, smem_bytes, c10::cuda::getCurrentCUDAStream()>>>(
      in, out, tiles_m, tiles_n, box_m, box_n, slot_bytes, (uint64_t)budget_ns, timeouts.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

FUNCTIONS = {
    "copy_tile": "void copy_tile(torch::Tensor x, torch::Tensor y, int64_t box_m, int64_t box_n, bool swizzle, "
                 "int64_t expect_bytes, int64_t budget_ns, int64_t smem_bytes, torch::Tensor timeouts)",
    "ring": "void ring(torch::Tensor x, torch::Tensor y, int64_t box_m, int64_t box_n, bool swizzle, int64_t stages, "
            "int64_t grid, int64_t budget_ns, int64_t smem_bytes, torch::Tensor timeouts)",
}

STAGES = (2, 3, 4)  # the ring entries compiled (tma_ring_2 .. tma_ring_4)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # the element types the host encodes
# The default ring: the course's 64 x 128 tile (lesson 03), unswizzled (no thread reads the tile, so bank
# conflicts cannot happen and any inner width is allowed), 2 slots, 4 CTAs per SM: 4 x 2 x 16 KiB = 128 KiB
# of an SM's 228 KiB, so each SM keeps about four loads and four stores in flight, which is what it takes to
# cover HBM's latency at full bandwidth (Little's law: bytes in flight = bandwidth x latency).
RING = {"box": (64, 128), "stages": 2, "ctas_per_sm": 4, "swizzle": False}
# 1 s: far beyond any honest wait, short enough that a bug ends the kernel. The budget is wall-clock time
# (%globaltimer), which runs on while the GPU serves another process's kernels: with 16 processes sharing an H200
# (the parallel test suite, 2026-12-01) a correct ring's wait once outlasted 0.1 s, the budget before
BUDGET_NS = 1_000_000_000
SMEM_PER_SM = 233_472  # bytes of shared memory per SM on Hopper (228 KiB); each CTA also takes 1 KiB
_RESERVED = 1024  # per CTA, by the system
_ALIGN = 64 + 1023  # slack for the barriers and for rounding the slots up to 1024 bytes (slots_base)


class BarrierTimeout(CourseError):
    """A bounded wait gave up: the barrier's phase never completed."""


# ---- plans: what a configuration asks for, checked before any launch --------------------------------------

@dataclass
class Plan:
    box: tuple
    esize: int
    stages: int
    tiles: int
    grid: int
    smem: int  # dynamic shared memory per CTA, alignment slack and barriers included

    @property
    def tile_bytes(self):
        return self.box[0] * self.box[1] * self.esize

    def text(self):
        return (f"box {self.box[0]}x{self.box[1]} ({self.tile_bytes // 1024} KiB), {self.stages} slot(s), "
                f"{self.grid} CTAs for {self.tiles} tiles, {self.smem / 1024:.1f} KiB shared memory each")


def _tiles(shape, box):
    return -(-shape[0] // box[0]) * -(-shape[1] // box[1])


def plan_copy(shape, esize, box):
    """One CTA per tile, one slot."""
    return Plan(tuple(box), esize, 1, _tiles(shape, box), _tiles(shape, box), _ALIGN + box[0] * box[1] * esize)


def plan_ring(shape, esize, box, stages, ctas_per_sm, sms):
    """The persistent ring: ``ctas_per_sm`` x ``sms`` CTAs (no more than there are tiles), ``stages`` slots each;
    ``ctas_per_sm=None``: as many as fit on an SM, at most RING's. Refuses a configuration whose CTAs do not all
    fit on an SM at once (the grid would no longer be resident, and its later CTAs would wait for a free SM)."""
    if stages not in STAGES:
        raise CourseError(f"ring: stages={stages}; the compiled rings have {', '.join(map(str, STAGES))} slots")
    tiles = _tiles(shape, box)
    p = Plan(tuple(box), esize, stages, tiles, 0, 0)
    p.smem = _ALIGN + stages * p.tile_bytes
    smem.Budget(stages, p.tile_bytes, compiled=p.smem).require()  # one CTA's limit (227 KiB on Hopper)
    if ctas_per_sm is None:
        ctas_per_sm = min(RING["ctas_per_sm"], SMEM_PER_SM // (p.smem + _RESERVED))
    if ctas_per_sm < 1:
        raise CourseError(f"ring: ctas_per_sm={ctas_per_sm}; at least one CTA per SM")
    p.grid = min(tiles, ctas_per_sm * sms)
    if ctas_per_sm * (p.smem + _RESERVED) > SMEM_PER_SM:
        fit = SMEM_PER_SM // (p.smem + _RESERVED)
        raise CourseError(f"ring: {ctas_per_sm} CTAs per SM x {(p.smem + _RESERVED) / 1024:.1f} KiB = "
                          f"{ctas_per_sm * (p.smem + _RESERVED) / 1024:.1f} KiB, but an SM has "
                          f"{SMEM_PER_SM / 1024:.0f} KiB of shared memory: at most {fit} fit with {stages} slots of "
                          f"{p.tile_bytes // 1024} KiB")
    return p


# ---- argument checks ---------------------------------------------------------------------------------------

def _check(launcher, x, out, box, swizzle):
    """x and out as the kernels need them: 2D, fp16/bf16/fp32, TMA's rules (tma_rules), a box the swizzle
    allows; out made (empty) when None."""
    operands.check(launcher, "x", x)
    if x.dtype not in DTYPES:
        raise ArgumentError(f"{launcher}: x is {str(x.dtype).removeprefix('torch.')}; the tensor maps here are "
                            f"encoded for float16, bfloat16 and float32")
    if x.dim() != 2:
        raise ArgumentError(f"{launcher}: x has {x.dim()} dimensions; these kernels copy 2D tensors "
                            f"(x.reshape(-1, x.shape[-1]) for a contiguous one)")
    y = operands.out(launcher, out, x.shape, x, result="the copy")
    for name, t in (("input", x), ("output", y)):
        tma_rules.check_operand(t, list(box), name)
    if swizzle and box[1] * x.element_size() > 128:
        raise TMAError(f"{launcher}: with the 128-byte swizzle the box's inner row is at most 128 bytes "
                       f"({128 // x.element_size()} elements of {str(x.dtype).removeprefix('torch.')}), "
                       f"this box's is {box[1] * x.element_size()}; use box=({box[0]}, {128 // x.element_size()})")
    if swizzle and box[0] < 8:
        raise TMAError(f"{launcher}: the 128-byte swizzle repeats every 8 rows of 128 bytes (1024 bytes); a box of "
                       f"{box[0]} rows does not fill one repeat: use at least 8 rows")
    return y


# ---- launching (GPU only) -----------------------------------------------------------------------------------

_TIMEOUTS = {}  # device index -> one int32 counter, written by a kernel only when a wait gives up


def module():
    """The built extension (cuda.build: once per source, then torch's cache)."""
    return cuda.build("tma_cuda", KERNELS, LAUNCHERS, FUNCTIONS)


def _counter(x):
    c = _TIMEOUTS.get(x.get_device())
    if c is None:
        c = _TIMEOUTS[x.get_device()] = torch.zeros(1, dtype=torch.int32, device=x.device)
    return c


def _raise_on_timeout(x, what, ctas):
    gave_up = timeouts(x)
    if gave_up:
        raise BarrierTimeout(f"{what}: a barrier never completed within {BUDGET_NS // 1_000_000} ms ({gave_up} of "
                             f"{ctas} CTAs gave up waiting, their tiles not stored); each barrier is armed with the "
                             f"bytes its load delivers, so a copy was lost or never issued")


def timeouts(x):
    """How many CTAs gave up waiting since the last look (on ``x``'s GPU); the counter starts again at zero."""
    c = _counter(x)
    gave_up = int(c.item())
    c.zero_()
    return gave_up


def timeout_message(expected, delivered, gave_up, ctas, what="the copy"):
    return (f"{what}: the barrier never completed: expected {expected} bytes, the copies deliver {delivered} "
            f"({gave_up} of {ctas} CTAs gave up waiting)")


def copy_tile(x, out=None, box=(64, 128), swizzle=False, check=True):
    """y = x, one CTA per tile, TMA load and store. ``check`` reads the timeout counter afterwards (a sync)."""
    y = _check("copy_tile", x, out, box, swizzle)
    p = plan_copy(x.shape, x.element_size(), box)
    module().copy_tile(x, y, box[0], box[1], swizzle, p.tile_bytes, BUDGET_NS, p.smem, _counter(x))
    if check:
        _raise_on_timeout(x, "copy_tile", p.grid)
    return y


def ring(x, out=None, box=RING["box"], stages=RING["stages"], ctas_per_sm=None, swizzle=RING["swizzle"], check=True):
    """y = x, a persistent grid of ``ctas_per_sm`` CTAs per SM (None: as many as fit, at most 4) walking the tiles
    through a ``stages``-slot ring. ``check`` reads the timeout counter afterwards (a sync: pass False when timing,
    then ask ``timeouts``)."""
    y = _check("ring", x, out, box, swizzle)
    p = plan_ring(x.shape, x.element_size(), box, stages, ctas_per_sm, sm_count(x))
    module().ring(x, y, box[0], box[1], swizzle, stages, p.grid, BUDGET_NS, p.smem, _counter(x))
    if check:
        _raise_on_timeout(x, "ring", p.grid)
    return y


def wrong_count(x, expect_bytes, out=None, box=(64, 128), budget_us=2000):
    """Run the one-tile copy with each barrier armed for ``expect_bytes`` while each TMA load delivers one tile,
    every wait bounded by ``budget_us``. Returns what happened: ``completed`` (all CTAs stored their tile) or a
    timeout with the course's message. Only counts at or above the tile's bytes are run: below it, the H200 raced (the phase
    completed before every byte had landed and the store read a partly filled tile) or never completed, depending
    on the count (lesson 06's ``short_count`` run measured both, bounded)."""
    y = _check("wrong_count", x, out, box, False)
    p = plan_copy(x.shape, x.element_size(), box)
    if expect_bytes < p.tile_bytes:
        raise CourseError(f"wrong_count: {expect_bytes} bytes is less than the {p.tile_bytes} a {box[0]}x{box[1]} "
                          f"box delivers; a short count is not run here: on the H200 it raced (the wait returned "
                          f"before the tile had landed) or timed out, depending on the count (lesson 06's "
                          f"short_count run measures it, bounded)")
    if p.grid > 64:
        raise CourseError(f"wrong_count: {p.grid} tiles; keep the demonstration to 64 or fewer (each CTA that waits "
                          f"in vain holds its SM for {budget_us} us)")
    timeouts(x)  # start from zero
    module().copy_tile(x, y, box[0], box[1], False, expect_bytes, int(budget_us * 1000), p.smem, _counter(x))
    gave_up = timeouts(x)
    report = {"expected": expect_bytes, "delivered": p.tile_bytes, "ctas": p.grid, "timed_out": gave_up,
              "completed": gave_up == 0}
    report["message"] = ("the barrier completed: expected = delivered = {} bytes in each of {} CTAs".format(
        p.tile_bytes, p.grid) if gave_up == 0 else timeout_message(expect_bytes, p.tile_bytes, gave_up, p.grid,
                                                                   "wrong_count"))
    return report


# ---- the evidence: nvcc's PTX and SASS, and Triton's PTX beside it ------------------------------------------

def compiled():
    """The kernels compiled for sm_90a with nvcc (no GPU needed): ``.ptx``, ``.sass``, ``.counts()``."""
    return cuda.compile_sm90a("tma_cuda", KERNELS)


KERNEL_NAMES = ("tma_copy_tile",) + tuple(f"tma_ring_{s}" for s in STAGES)


# Each protocol step: our PTX line, the line Triton emitted for the same step in lesson 03's copy, the PTX ISA
# section both come from. ``anywhere``: found anywhere in the kernel (the two put it in different places);
# otherwise the first match after the previous step's line, so a repeated instruction is the right one.
PTX_MAP = [
    {"step": "one thread issues the copies", "ours": "elect.sync", "triton": "elect.sync", "anywhere": True,
     "isa": "elect.sync"},
    {"step": "a barrier per slot, one arrival per phase", "ours": "mbarrier.init", "triton": "mbarrier.init",
     "isa": "mbarrier.init"},
    # after the init: ours a release of the init at cluster scope, needed where other CTAs use the barrier (lesson
    # 06's clusters) and harmless here; Triton's copy has no fence there, only the block's barrier
    {"step": "after the init, before the barrier is used", "ours": "fence.mbarrier_init", "triton": "bar.sync",
     "isa": "membar/fence (fence.mbarrier_init); bar.sync"},
    {"step": "arm the barrier with the tile's bytes", "ours": "mbarrier.arrive.expect_tx",
     "triton": "mbarrier.arrive.expect_tx", "isa": "mbarrier.arrive (.expect_tx)"},
    {"step": "TMA load, bytes reported to the barrier",
     "ours": "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
     "triton": "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
     "isa": "cp.async.bulk.tensor"},
    {"step": "wait for the phase of this parity", "ours": "mbarrier.try_wait.parity",
     "triton": "mbarrier.try_wait.parity", "isa": "mbarrier.test_wait/mbarrier.try_wait"},
    {"step": "order shared memory for the async proxy", "ours": "fence.proxy.async.shared::cta",
     "triton": "fence.proxy.async.shared::cta", "isa": "membar/fence (fence.proxy.async)"},
    {"step": "TMA store from shared memory", "ours": "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
     "triton": "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", "isa": "cp.async.bulk.tensor"},
    {"step": "close the store's bulk group", "ours": "cp.async.bulk.commit_group",
     "triton": "cp.async.bulk.commit_group", "isa": "cp.async.bulk.commit_group"},
    {"step": "wait until the stores have read shared memory", "ours": "cp.async.bulk.wait_group.read",
     "triton": "cp.async.bulk.wait_group.read", "isa": "cp.async.bulk.wait_group"},
]

# which of our kernels stands beside which of lesson 03's Triton copies
PAIRS = {"copy": ("tma_copy_tile", "copy_tma_kernel"), "ring": ("tma_ring_2", "copy_tma_loop_kernel")}


def _protocol_lines(ptx, key):
    """Per PTX_MAP step, the first line of ``ptx`` (one kernel) whose instruction starts with the step's ``key``
    entry (after the previous step's line unless the step is ``anywhere``); None where there is none."""
    ops = list(isa.ptx_ops(ptx))
    found, cursor = [], 0
    for step in PTX_MAP:
        start = 0 if step.get("anywhere") else cursor
        hit = next((i for i in range(start, len(ops)) if ops[i][0].startswith(step[key])), None)
        found.append(None if hit is None else ops[hit][1])
        if hit is not None and not step.get("anywhere"):
            cursor = hit + 1
    return found


def triton_ptx(kind="copy"):
    """Triton's PTX for lesson 03's copy (``copy``: copy_tma_kernel; ``ring``: copy_tma_loop_kernel, 2 stages),
    compiled for sm_90 as a 64x128 fp16 launch would be (kernels.lab.aot; no GPU needed)."""
    from ..lab import aot
    from . import copy
    x = torch.empty((256, 256), dtype=torch.float16, device=DEVICE)
    y = torch.empty_like(x)
    args = (x, y, 256, 256, 256, 256)
    if kind == "copy":
        return aot.compile_sm90(copy.copy_tma_kernel, *args, BLOCK_M=64, BLOCK_N=128).ptx
    return aot.compile_sm90(copy.copy_tma_loop_kernel, *args, BLOCK_M=64, BLOCK_N=128, stages=2).ptx


def side_by_side(kind="copy", ours_ptx=None, triton=None):
    """One row per PTX_MAP step: our line (from ``compiled()``) and Triton's (``triton_ptx``), both as written."""
    if kind not in PAIRS:
        raise CourseError(f"side_by_side: kind is 'copy' or 'ring', not {kind!r}")
    name, _ = PAIRS[kind]
    ours = _protocol_lines(cuda.kernel_ptx(ours_ptx or compiled().ptx, name), "ours")
    theirs = _protocol_lines(triton or triton_ptx(kind), "triton")
    return [{"step": s["step"], "isa": s["isa"], "ours": o, "triton": t} for s, o, t in zip(PTX_MAP, ours, theirs)]


def side_by_side_text(rows):
    """The rows as text: the step, then our line and Triton's under it."""
    out = []
    for r in rows:
        out += [f"{r['step']}  (PTX ISA: {r['isa']})", f"    CUDA   {r['ours']}", f"    Triton {r['triton']}"]
    return "\n".join(out)
