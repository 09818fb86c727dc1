"""Bank conflicts measured (lesson 06), in CUDA C++ by hand: a tile TMA loads into shared memory, then
read column by column, once as TMA wrote it row after row and once as TMA wrote it with the 128-byte
swizzle.

- ``column_read``: each block TMA-loads a 32 x 64 fp16 tile (32 rows of 128 bytes), and every warp reads
  one column of it, thread t from row t, 4 or 16 bytes per thread, over and over (``iters`` times, a
  different column each time, every column as often). Unswizzled, the column sits in one bank (4-byte
  reads: 32-way) or one bank group (16-byte reads: 8-way per quarter-warp): 32 passes per read. Swizzled,
  row r's chunk c is at chunk c XOR (r % 8): 4 passes. ``kernels.lab.swizzle.column_read`` derives both.
  What each thread read is summed, weighted by column, so a read of the wrong column changes the result
  (``reference``).
- ``tma_layout``: one TMA load of a box with any swizzle, and shared memory copied out byte for byte,
  so the layout ``kernels.lab.swizzle`` computes is checked against the one TMA writes (``predicted``).

CUDA source: ``KERNELS`` (plain CUDA and inline PTX, compiled alone by ``compiled()`` anywhere nvcc is),
``LAUNCHERS`` (the tensor maps, encoded on the host, and the launches on torch tensors; built on a GPU)."""
import torch

from ..lab import cuda, operands, swizzle, tma_rules
from ..lab.errors import ArgumentError, CourseError

ROWS, ROW_BYTES, THREADS = 32, 128, 256  # as in KERNELS: a warp reads 32 rows; 8 warps per block
COLS = ROW_BYTES // 2                    # 64 fp16: one 128-byte swizzle span
LAYOUT_BYTES = 8192                      # the largest box tma_layout holds
ITERS = 1024                             # reads per thread; a multiple of 32 (every column equally often)
WIDTHS = (4, 16)

KERNELS = r"""
#include <cuda.h>     // CUtensorMap (the driver's 128-byte opaque tensor map type); nothing is linked from libcuda
#include <cstdint>

namespace banks {

constexpr int kRows = 32;                       // one row per lane: a warp reads one column of the tile
constexpr int kRowBytes = 128;                  // 64 fp16: every bank once, and one 128-byte swizzle span
constexpr int kTileBytes = kRows * kRowBytes;
constexpr int kThreads = 256;                   // 8 warps read the same tile, each from its own column on
constexpr int kLayoutBytes = 8192;
constexpr long long kPatience = 2000000000LL;   // SM cycles (about a second): a wait that gives up, not a hang

""" + cuda.TMA_DEVICE + r"""
// The 128-byte swizzle as TMA applies it to shared-memory addresses: the 16-byte chunk (bits 4-6) XORed
// with the 128-byte line (bits 7-9) - kernels/lab/swizzle.py's `swizzled`, for a 1024-byte aligned base.
__device__ __forceinline__ uint32_t swizzle128(uint32_t off) { return off ^ (((off >> 7) & 7) << 4); }

// One thread arms the barrier and starts the TMA load of the box at (x0, y0); every thread then waits for
// the bytes, giving up after kPatience cycles (false) instead of hanging the GPU.
__device__ __forceinline__ bool load_box(const CUtensorMap* map, void* dst, uint64_t* bar, int x0, int y0,
                                         uint32_t bytes) {
  const uint32_t b = smem_u32(bar);
  if (threadIdx.x == 0) {
    // PTX ISA, mbarrier.init: phase 0 completes after one arrival (the expect_tx below) and the bytes
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    // PTX ISA, membar/fence (fence.mbarrier_init): the initialised barrier is seen by the TMA unit
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // PTX ISA, mbarrier.arrive.expect_tx: arrive, and tell the barrier how many bytes this phase waits for
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
    // PTX ISA, cp.async.bulk.tensor: the box at (x0, y0) into dst, laid out (and swizzled) as the tensor map
    // says; the TMA unit counts the bytes it writes against the barrier (complete_tx)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        :: "r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(y0), "r"(b) : "memory");
  }
  const long long start = clock64();
  uint32_t done = 0;
  while (!done) {
    // PTX ISA, mbarrier.try_wait: has phase 0 completed (parity 0)? It may wait a while before saying no
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b), "r"(0) : "memory");
    if (!done && clock64() - start > kPatience) return false;
  }
  return true;
}

// status: 1 = the TMA bytes never arrived, 2 = the buffer is not 1024-byte aligned (the swizzle would shift)
__device__ __forceinline__ bool ready(const CUtensorMap* map, void* dst, uint64_t* bar, int y0, uint32_t bytes,
                                      int* status) {
  if (smem_u32(dst) & 1023) {
    if (threadIdx.x == 0) atomicExch(status, 2);
    return false;
  }
  if (!load_box(map, dst, bar, 0, y0, bytes)) {
    if (threadIdx.x == 0) atomicExch(status, 1);
    return false;
  }
  return true;
}

// Every warp reads a column of the block's tile `iters` times: thread `lane` from row `lane`, WIDTH bytes,
// the column moving on each time. SWIZZLED: the tile was written with CU_TENSOR_MAP_SWIZZLE_128B, so the
// thread finds its bytes where the swizzle put them. Nothing else differs between the four versions.
template <int WIDTH, bool SWIZZLED>
__global__ void __launch_bounds__(kThreads) column_read(const __grid_constant__ CUtensorMap map, uint32_t* out,
                                                        int iters, int* status) {
  __shared__ __align__(1024) uint8_t tile[kTileBytes];  // aligned to the pattern's repeat: row 0 gets key 0
  __shared__ __align__(8) uint64_t bar;
  if (!ready(&map, tile, &bar, blockIdx.x * kRows, kTileBytes, status)) return;
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t base = smem_u32(tile);
  uint32_t acc = 0;
#pragma unroll 4
  for (int it = 0; it < iters; ++it) {
    if constexpr (WIDTH == 4) {
      const uint32_t col = (it + 5 * warp) & 31;  // the 4-byte word of the row; the same for the whole warp
      uint32_t off = lane * kRowBytes + col * 4;
      if constexpr (SWIZZLED) off = swizzle128(off);
      uint32_t v;
      // PTX ISA, ld (.shared state space): 4 bytes. volatile: every one of the iters reads is issued
      asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(base + off));
      acc += (col + 1) * v;  // weighted by column: the wrong column gives another sum
    } else {
      const uint32_t col = (it + warp) & 7;  // the 16-byte chunk of the row
      uint32_t off = lane * kRowBytes + col * 16;
      if constexpr (SWIZZLED) off = swizzle128(off);
      uint32_t x, y, z, w;
      // PTX ISA, ld (.shared, .v4): 16 bytes in one access
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(base + off));
      acc += (col + 1) * (x + 2 * y + 3 * z + 4 * w);
    }
  }
  out[blockIdx.x * kThreads + threadIdx.x] = acc;
}

template __global__ void column_read<4, false>(const __grid_constant__ CUtensorMap, uint32_t*, int, int*);
template __global__ void column_read<4, true>(const __grid_constant__ CUtensorMap, uint32_t*, int, int*);
template __global__ void column_read<16, false>(const __grid_constant__ CUtensorMap, uint32_t*, int, int*);
template __global__ void column_read<16, true>(const __grid_constant__ CUtensorMap, uint32_t*, int, int*);

// One TMA load of the box at (0, 0), and shared memory copied out word for word: TMA's layout, as it is.
__global__ void tma_layout(const __grid_constant__ CUtensorMap map, uint32_t* out, int bytes, int* status) {
  __shared__ __align__(1024) uint8_t box[kLayoutBytes];
  __shared__ __align__(8) uint64_t bar;
  if (!ready(&map, box, &bar, 0, bytes, status)) return;
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x) out[i] = reinterpret_cast<const uint32_t*>(box)[i];
}

}  // namespace banks
"""

LAUNCHERS = cuda.TENSOR_MAP_HOST + r"""
namespace {

// A map over a row-major 2D tensor of 16-bit elements (moved as raw bits), box_rows x box_cols, no L2 promotion.
CUtensorMap map_2d(const torch::Tensor& x, int64_t box_rows, int64_t box_cols, CUtensorMapSwizzle swizzle) {
  return course_map_2d(x, box_rows, box_cols, CU_TENSOR_MAP_DATA_TYPE_UINT16, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE);
}

}  // namespace

void column_read(torch::Tensor x, torch::Tensor out, torch::Tensor status, int64_t width, bool swizzled,
                 int64_t iters) {
  const CUtensorMap map = map_2d(x, banks::kRows, banks::kRowBytes / 2,
                                 swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
  const dim3 grid(x.size(0) / banks::kRows), block(banks::kThreads);
  auto stream = c10::cuda::getCurrentCUDAStream();
  auto* o = reinterpret_cast<uint32_t*>(out.data_ptr<int32_t>());
  int* s = status.data_ptr<int32_t>();
  const int n = (int)iters;
  if (width == 4 && !swizzled) banks::column_read<4, false><<<grid, block, 0, stream>>>(map, o, n, s);
  else if (width == 4) banks::column_read<4, true><<<grid, block, 0, stream>>>(map, o, n, s);
  else if (!swizzled) banks::column_read<16, false><<<grid, block, 0, stream>>>(map, o, n, s);
  else banks::column_read<16, true><<<grid, block, 0, stream>>>(map, o, n, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void tma_layout(torch::Tensor x, torch::Tensor out, torch::Tensor status, int64_t swizzle, int64_t box_rows,
                int64_t box_cols) {
  const CUtensorMap map = map_2d(x, box_rows, box_cols, (CUtensorMapSwizzle)swizzle);
  banks::tma_layout<<<1, 128, 0, c10::cuda::getCurrentCUDAStream()>>>(
      map, reinterpret_cast<uint32_t*>(out.data_ptr<int16_t>()), (int)(box_rows * box_cols * 2),
      status.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

FUNCTIONS = {
    "column_read": "void column_read(torch::Tensor x, torch::Tensor out, torch::Tensor status, int64_t width, "
                   "bool swizzled, int64_t iters)",
    "tma_layout": "void tma_layout(torch::Tensor x, torch::Tensor out, torch::Tensor status, int64_t swizzle, "
                  "int64_t box_rows, int64_t box_cols)",
}

_STATUS = {}  # device -> one int32 the kernels set when a wait times out (1) or a buffer is misaligned (2)
_STATUS_TEXT = {1: "a TMA load's bytes never arrived: the kernel's bounded wait gave up after about a second",
                2: "shared memory was not 1024-byte aligned, so the 128-byte swizzle would start mid-pattern"}


def compiled():
    """The kernels compiled for sm_90a (PTX, cubin, SASS): any machine with nvcc, no GPU."""
    return cuda.compile_sm90a("banks", KERNELS)


def module():
    """The built extension (GPU only; built once, then loaded from torch's cache)."""
    return cuda.build("banks", KERNELS, LAUNCHERS, FUNCTIONS)


def _status(device):
    if device not in _STATUS:
        _STATUS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return _STATUS[device]


def check_status(device=None):
    """Raise CourseError if a kernel on ``device`` reported a timeout or a misaligned buffer (sticky)."""
    s = _status(device or torch.device("cuda", torch.cuda.current_device()))
    code = int(s.item())
    if code:
        raise CourseError(f"banks_cuda: {_STATUS_TEXT.get(code, f'status {code}')}")


def _check_16bit(launcher, x):
    if x.element_size() != 2:
        raise ArgumentError(f"{launcher}: x is {str(x.dtype).removeprefix('torch.')}; the tensor map here is of "
                            "16-bit elements (float16, bfloat16 or int16)")


def tile(blocks):
    """Fresh random fp16 data for ``blocks`` blocks: ``blocks`` tiles of 32 x 64 on top of each other."""
    return torch.randn(blocks * ROWS, COLS, device="cuda", dtype=torch.float16)


def column_read(x, width=16, swizzled=True, iters=ITERS, out=None):
    """One int32 per thread (``blocks * 256``): each warp of block b reading columns of x's rows
    32 b .. 32 b + 31, ``width`` bytes per thread, ``iters`` times, from the unswizzled or the
    128-byte-swizzled layout TMA wrote."""
    operands.check("column_read", "x", x, layout="matrix")
    _check_16bit("column_read", x)
    if x.shape[1] != COLS or x.shape[0] % ROWS or not x.shape[0]:
        raise ArgumentError(f"column_read: x has shape {tuple(x.shape)}; it must be (32 k, 64): k tiles of 32 rows "
                            "of 128 bytes, one per block")
    if width not in WIDTHS:
        raise ArgumentError(f"column_read: width={width}; each thread reads 4 or 16 bytes")
    if iters <= 0 or iters % 32:
        raise ArgumentError(f"column_read: iters={iters}; it must be a positive multiple of 32, so each thread reads "
                            "every column equally often (what `reference` assumes)")
    tma_rules.check_operand(x, [ROWS, COLS], "x")
    like = torch.empty(0, dtype=torch.int32, device=x.device)
    out = operands.out("column_read", out, (x.shape[0] // ROWS * THREADS,), like, "flat", result="one int32 per thread")
    module().column_read(x, out, _status(x.device), width, swizzled, iters)
    return out


def reference(x, width=16, iters=ITERS):
    """What ``column_read`` must return, computed by torch: thread t of a block sums, over its reads,
    (column + 1) times what it read (16-byte reads: words weighted 1, 2, 3, 4), modulo 2^32. Every
    column is read iters / period times whatever the warp, so it is a weighted sum of row t % 32."""
    words = x.contiguous().view(torch.int32).view(-1, ROWS, ROW_BYTES // 4).long() & 0xFFFFFFFF
    if width == 4:
        per_row = (words * torch.arange(1, 33, device=x.device)).sum(-1)
        period = 32
    else:
        w = (words.view(-1, ROWS, 8, 4) * torch.arange(1, 5, device=x.device)).sum(-1)
        per_row = (w * torch.arange(1, 9, device=x.device)).sum(-1)
        period = 8
    per_row = (per_row & 0xFFFFFFFF) * (iters // period) & 0xFFFFFFFF
    per_thread = per_row.repeat(1, THREADS // ROWS)  # thread t reads row t % 32
    return ((per_thread + 2 ** 31) % 2 ** 32 - 2 ** 31).to(torch.int32).view(-1)


def derived(width, swizzled):
    """The passes a warp's read takes, derived by the course (``kernels.lab.swizzle.column_read``)."""
    return swizzle.column_read(128 if swizzled else 0, width)


def variants(x, out, iters=ITERS):
    """{name: launch} for the four reads, e.g. ``read16_swizzled``."""
    return {f"read{w}_{'swizzled' if s else 'plain'}": (lambda w=w, s=s: column_read(x, w, s, iters, out))
            for w in WIDTHS for s in (False, True)}


# ---- TMA's own layout, read back ---------------------------------------------------------------------

def _layout_args(launcher, x, mode, box_rows, box_cols):
    _check_16bit(launcher, x)
    swizzle.check_box(mode, box_cols * x.element_size(), x.dtype)
    if box_rows * box_cols * 2 > LAYOUT_BYTES:
        raise ArgumentError(f"{launcher}: a {box_rows} x {box_cols} box is {box_rows * box_cols * 2} bytes; "
                            f"the kernel holds {LAYOUT_BYTES}")
    tma_rules.check_operand(x, [box_rows, box_cols], "x")


def predicted(x, mode, box_rows, box_cols):
    """The box at (0, 0) of ``x`` (16-bit), arranged as ``kernels.lab.swizzle`` says TMA writes it into
    shared memory with ``mode``: a (box_rows, box_cols) tensor in shared-memory order. Runs anywhere."""
    box = x[:box_rows, :box_cols].contiguous().view(-1)
    t = swizzle.tile(mode, box_rows, box_cols * 2, x.dtype)
    where = torch.tensor([t.address(r, 2 * e) // 2 for r in range(box_rows) for e in range(box_cols)])
    image = torch.empty_like(box)
    image[where.to(box.device)] = box
    return image.view(box_rows, box_cols)


def tma_layout(x, mode, box_rows, box_cols):
    """Shared memory after one TMA load of the box at (0, 0) with swizzle ``mode`` (GPU)."""
    operands.check("tma_layout", "x", x, layout="matrix")
    _layout_args("tma_layout", x, mode, box_rows, box_cols)
    out = torch.full((box_rows, box_cols), -1, dtype=torch.int16, device=x.device)
    module().tma_layout(x.view(torch.int16), out, _status(x.device), swizzle.ENUM[swizzle.span(mode)], box_rows,
                        box_cols)
    return out.view(x.dtype)
