"""Thread-block clusters by hand in CUDA (lesson 06): distributed shared memory and TMA multicast.

On Hopper the blocks of a **cluster** (2 to 8 of them, portable; up to 16 with opt-in) are started
together on the SMs of one GPC, and each can read and write the others' shared memory (distributed
shared memory, DSMEM). One TMA load can then land in the shared memory of several blocks of a cluster
at once (**multicast**): the tile is read from L2 once and delivered to every block named in a mask.

Three pieces, all plain CUDA with inline PTX (``KERNELS``) and torch launchers (``LAUNCHERS``):
- ``dsmem_ring``: a cluster of 2 (``__cluster_dims__``) in which each block writes its values into its
  neighbour's shared memory through ``mapa`` + ``st.shared::cluster``, with ``barrier.cluster`` around.
- ``tile_sums``: a cluster of ``cluster`` blocks streams the same tiles through a ring of TMA stages;
  every block computes the column sums of every tile. ``multicast=True``: rank 0 issues one multicast
  load per tile for the whole cluster, and each block tells rank 0's "empty" barrier when its copy of a
  slot is free. ``multicast=False``: the same loop, the same cluster, each block loads its own copy.
  The cluster size is a launch attribute here (``cudaLaunchKernelEx``), so one kernel serves 1, 2 and 4.
- ``traffic``: the bytes each variant moves from L2 to the SMs, derived (no counters are read: L2 and
  HBM traffic need Nsight Compute, which the course does not assume).

``framework_support`` records what Triton 3.6 and TileLang 0.1.15 expose of clusters and multicast,
with the evidence (``triton_cluster_evidence``, ``tilelang_multicast_evidence`` recompute it).

PTX lines are cited by their section of the PTX ISA (NVIDIA, "Parallel Thread Execution ISA", 8.x/9.0):
cp.async.bulk.tensor, mbarrier, mapa, barrier.cluster, st (state space .shared::cluster), and the special
registers %cluster_ctarank / %cluster_nctarank. Launch side: NVIDIA, CUDA C++ Programming Guide,
"Thread Block Clusters" and "Distributed Shared Memory"; CUDA Runtime API, cudaLaunchKernelEx."""
from pathlib import Path

import torch

from ..lab import cuda, operands, tma_rules
from ..lab.errors import ArgumentError, CourseError, NoGPUError

NAME = "cluster_cuda"
COLS = 64          # tile width in fp16 elements: one 128-byte row, the widest inner box without swizzle
THREADS = 128      # threads per block of tile_sums: 16 per tile row (8 bytes each), 8 rows at a time
MAX_WAIT_CYCLES = 2_000_000_000  # about 1 s at the H200's clock: a wait longer than this is a broken protocol

KERNELS = r"""
#include <cstdint>
#include <cuda.h>   // CUtensorMap
#include <cuda_fp16.h>
""" + cuda.TMA_DEVICE + r"""
// ---- cluster identity and the cluster-wide barrier -------------------------------------------------
// PTX ISA, "Special registers": %cluster_ctarank is this block's rank in its cluster, %cluster_nctarank
// the cluster's size in blocks.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t n; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n)); return n;
}
// PTX ISA, "barrier.cluster": every thread of every block of the cluster arrives, then waits. Release on
// arrive and acquire on wait make the shared-memory writes before the barrier (local or remote) visible
// to every block after it. .aligned: all threads of a warp execute it together.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// PTX ISA, "mapa": the address of the same shared-memory variable in block `rank` of this cluster, in the
// .shared::cluster window (a 32-bit address that ld/st/mbarrier accept with .shared::cluster).
__device__ __forceinline__ uint32_t map_to_rank(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// ---- 1. distributed shared memory: each block writes into its neighbour's shared memory ------------
// A cluster of 2 fixed at compile time: the PTX carries .explicitcluster and .reqnctapercluster 2, and a
// plain <<<grid, block>>> launch gets clusters (the grid must be a multiple of 2).
extern "C" __global__ void __cluster_dims__(2, 1, 1)
dsmem_ring(const float *__restrict__ in, float *__restrict__ out, uint32_t *__restrict__ ranks, int n) {
  __shared__ float buf[1024];
  const uint32_t rank = cluster_rank(), size = cluster_size();
  const int i = blockIdx.x * n + threadIdx.x;
  // Every block of the cluster must be running before another writes into its shared memory.
  cluster_sync();
  const uint32_t there = map_to_rank(smem_u32(&buf[threadIdx.x]), (rank + 1) % size);
  // PTX ISA, "st": the .shared::cluster state space reaches any block of the cluster (here: the next).
  asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(there), "f"(in[i]) : "memory");
  // The neighbour's writes into buf are visible after this, and no block leaves (freeing its shared
  // memory) while another may still write into it.
  cluster_sync();
  out[i] = buf[threadIdx.x];
  if (threadIdx.x == 0) ranks[blockIdx.x] = rank;
}

// ---- mbarrier helpers beyond TMA_DEVICE's (PTX ISA, "mbarrier") ---------------------------------------
// An arrival on a barrier of any block of the cluster (`bar` from mapa). The form CUTLASS's
// ClusterBarrier::arrive(cta_id) uses: default semantics (release at CTA scope); the reads of the slot
// are finished (in registers) before __syncthreads, so the owner's next TMA write cannot overtake them.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(bar) : "memory");
}
// Wait for the phase of parity `parity` to complete, bounded: after max_cycles the wait gives up and
// counts a timeout, so a broken protocol ends the kernel with an error count instead of hanging the GPU.
// After one timeout the thread's budget drops to zero: its later waits give up at once (seconds, not
// one second per tile).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, long long &max_cycles, int *timeouts) {
  long long start = 0;
  while (!mbar_try_wait(bar, parity)) {
    if (start == 0) start = clock64();
    else if (clock64() - start > max_cycles) { atomicAdd(timeouts, 1); max_cycles = 0; return; }
  }
}

// ---- TMA loads (PTX ISA, "cp.async.bulk.tensor") -----------------------------------------------------
// One box of the tensor map at (x, y) into this block's shared memory; the bytes complete on `bar`. The map
// goes in as a pointer, not cast to an integer as in tma_cuda's tma_load_2d: with the cast nvcc places the
// parameter's address conversion elsewhere in this kernel's PTX.
__device__ __forceinline__ void tma_load(const CUtensorMap *map, uint32_t dst, uint32_t bar, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(x), "r"(y) : "memory");
}
// The same box delivered to every block whose bit is set in `mask`, at the same shared-memory offset
__device__ __forceinline__ void tma_load_multicast(const CUtensorMap *map, uint32_t dst, uint32_t bar, int x,
                                                   int y, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%3, %4}], [%2], %5;"
               :: "r"(dst), "l"(map), "r"(bar), "r"(x), "r"(y), "h"(mask) : "memory");
}

// ---- 2 and 3. the blocks of a cluster stream the same tiles; each sums every tile's columns ----------
// Tiles are rows x 64 fp16 boxes, numbered row-major over the tensor; cluster c reads tiles
// first + c * per_cluster + j for j < tiles (first = 0, per_cluster = tiles: each cluster its own slice;
// per_cluster = 0: every cluster the same tiles). A ring of `stages` slots in dynamic shared memory,
// each with a "full" barrier (the data landed) and an "empty" barrier (every reader is done with it).
// multicast: rank 0 alone issues, one multicast per tile; each block arrives on rank 0's empty barrier.
// Otherwise each block issues its own loads and arrives on its own empty barrier.
extern "C" __global__ void __launch_bounds__(128)
tile_sums(const __grid_constant__ CUtensorMap map, float *__restrict__ out, int *__restrict__ timeouts,
          int rows, int tiles, int per_cluster, int tiles_x, int stages, int multicast, long long max_cycles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t tile_bytes = rows * 64 * 2;
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + stages * tile_bytes);
  uint64_t *empty = full + stages;
  const uint32_t rank = cluster_rank(), size = cluster_size();
  const int cluster = blockIdx.x / size;
  const bool issuer = multicast ? rank == 0 : true;
  const uint32_t owner = multicast ? 0 : rank;            // whose empty barrier guards a slot
  const uint16_t mask = static_cast<uint16_t>((1u << size) - 1);
  const int tid = threadIdx.x;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(smem_u32(&full[s]), 1);                    // this block's own expect_tx
      mbar_init(smem_u32(&empty[s]), multicast ? size : 1);  // one release per reader of the slot
    }
    // PTX ISA, "fence.mbarrier_init": the initialised barriers are visible cluster-wide before any
    // other block (or a multicast) touches them; the cluster barrier below carries it.
    fence_mbarrier_init();
  }
  cluster_sync();

  auto tile_xy = [&](int j, int &x, int &y) {
    const int t = cluster * per_cluster + j;
    x = (t % tiles_x) * 64; y = (t / tiles_x) * rows;
  };
  auto issue = [&](int j) {
    const int s = j % stages;
    int x, y; tile_xy(j, x, y);
    const uint32_t dst = smem_u32(smem + s * tile_bytes), bar = smem_u32(&full[s]);
    if (multicast) tma_load_multicast(&map, dst, bar, x, y, mask);
    else tma_load(&map, dst, bar, x, y);
  };
  // Fill the ring: every block expects its tiles' bytes on its own full barriers; the issuer loads.
  if (tid == 0) {
    for (int j = 0; j < stages && j < tiles; ++j) {
      mbar_arrive_expect_tx(smem_u32(&full[j]), tile_bytes);
      if (issuer) issue(j);
    }
  }

  // 16 threads cover one 128-byte row (4 fp16 each), 8 rows at a time: conflict-free 8-byte reads.
  const int c4 = (tid % 16) * 4, r0 = tid / 16;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j = 0; j < tiles; ++j) {
    const int s = j % stages;
    const uint32_t parity = (j / stages) & 1;             // flips each time the ring wraps
    mbar_wait(smem_u32(&full[s]), parity, max_cycles, timeouts);
    const __half2 *tile = reinterpret_cast<const __half2 *>(smem + s * tile_bytes);
    for (int r = r0; r < rows; r += 8) {
      const uint2 v = *reinterpret_cast<const uint2 *>(tile + (r * 64 + c4) / 2);
      const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&v.x));
      const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&v.y));
      acc[0] += a.x; acc[1] += a.y; acc[2] += b.x; acc[3] += b.y;
    }
    __syncthreads();                                       // every thread of this block is done with slot s
    if (tid == 0) {
      mbar_arrive_cluster(map_to_rank(smem_u32(&empty[s]), owner));
      const int next = j + stages;
      if (next < tiles) {
        mbar_arrive_expect_tx(smem_u32(&full[s]), tile_bytes);  // this block's next phase of slot s
        if (issuer) {
          // The slot may be refilled once every block that reads it has released it: in multicast
          // mode that is the whole cluster, since the refill lands in all of their shared memories.
          mbar_wait(smem_u32(&empty[s]), parity, max_cycles, timeouts);
          issue(next);
        }
      }
    }
  }

  // Partial sums of the 8 row groups -> 64 column sums of this block.
  float *part = reinterpret_cast<float *>(smem);           // the ring is drained: reuse its first bytes
  for (int k = 0; k < 4; ++k) part[r0 * 64 + c4 + k] = acc[k];
  __syncthreads();
  if (tid < 64) {
    float sum = 0.f;
    for (int g = 0; g < 8; ++g) sum += part[g * 64 + tid];
    out[blockIdx.x * 64 + tid] = sum;
  }
  // Remote arrivals on rank 0's empty barriers must land before rank 0's shared memory goes away.
  cluster_sync();
}
"""

LAUNCHERS = cuda.TENSOR_MAP_HOST + r"""

#define CHECK_CUDA(call) do { cudaError_t e_ = (call); \
  TORCH_CHECK(e_ == cudaSuccess, #call " failed: ", cudaGetErrorString(e_)); } while (0)

void dsmem_ring_launch(torch::Tensor x, torch::Tensor out, torch::Tensor ranks) {
  const int blocks = x.size(0), n = x.size(1);
  dsmem_ring<<<blocks, n, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), reinterpret_cast<uint32_t *>(ranks.data_ptr<int>()), n);
  CHECK_CUDA(cudaGetLastError());
}

// x: (M, N) fp16, rows x 64 boxes, no swizzle (a 128-byte inner row is the widest box without one).
void tile_sums_launch(torch::Tensor x, torch::Tensor out, torch::Tensor timeouts, int64_t rows, int64_t tiles,
                      int64_t per_cluster, int64_t cluster, int64_t stages, bool multicast, int64_t max_cycles) {
  const CUtensorMap map = course_map_2d(x, rows, 64, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_SWIZZLE_NONE,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B);

  const int smem = stages * (rows * 64 * 2) + 2 * stages * 8;
  CHECK_CUDA(cudaFuncSetAttribute(tile_sums, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // CUDA Runtime API, cudaLaunchKernelEx: the cluster shape is a launch attribute, so one kernel
  // (no __cluster_dims__) runs with clusters of 1, 2 or 4 blocks.
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(out.size(0)); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem;
  cfg.stream = c10::cuda::getCurrentCUDAStream(); cfg.attrs = attr; cfg.numAttrs = 1;
  const int tiles_x = x.size(1) / 64;
  CHECK_CUDA(cudaLaunchKernelEx(&cfg, tile_sums, map, out.data_ptr<float>(), timeouts.data_ptr<int>(),
                                int(rows), int(tiles), int(per_cluster), tiles_x, int(stages), int(multicast),
                                static_cast<long long>(max_cycles)));
}

// How many clusters of this shape fit on the GPU at once (CUDA Runtime API, cudaOccupancyMaxActiveClusters).
int64_t max_active_clusters(int64_t cluster, int64_t rows, int64_t stages) {
  const int smem = stages * (rows * 64 * 2) + 2 * stages * 8;
  CHECK_CUDA(cudaFuncSetAttribute(tile_sums, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(cluster * 64); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr; cfg.numAttrs = 1;
  int n = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveClusters(&n, tile_sums, &cfg));
  return n;
}
"""

FUNCTIONS = {
    "dsmem_ring_launch": "void dsmem_ring_launch(torch::Tensor x, torch::Tensor out, torch::Tensor ranks)",
    "tile_sums_launch": "void tile_sums_launch(torch::Tensor x, torch::Tensor out, torch::Tensor timeouts, "
                        "int64_t rows, int64_t tiles, int64_t per_cluster, int64_t cluster, int64_t stages, "
                        "bool multicast, int64_t max_cycles)",
    "max_active_clusters": "int64_t max_active_clusters(int64_t cluster, int64_t rows, int64_t stages)",
}


def compiled():
    """The kernels compiled for sm_90a (PTX, cubin, SASS on demand): no GPU needed."""
    return cuda.compile_sm90a(NAME, KERNELS)


def module():
    """The built extension (GPU only; built once, then loaded from torch's cache)."""
    return cuda.build(NAME, KERNELS, LAUNCHERS, FUNCTIONS)


# ---- launchers: the course's checks first (they run anywhere), then the GPU ----------------------------

def _require_hopper(what):
    from ..lab.mode import MODE
    if MODE != "hopper":
        raise NoGPUError(f"{what}: clusters, distributed shared memory and TMA multicast need a Hopper GPU (sm_90); "
                         f"without one, read the code nvcc compiles here: cluster_cuda.compiled().ptx / .sass")


def dsmem_ring(x, out=None):
    """Each block of a 2-block cluster owns one row of ``x`` (fp32, at most 1024 wide) and writes it into
    the other block's shared memory; each block then writes out what it received. Returns ``(out, ranks)``:
    ``out[b]`` is ``x`` of ``b``'s partner, ``ranks[b]`` the cluster rank block ``b`` ran as."""
    operands.check("dsmem_ring", "x", x, layout="matrix")
    if x.dtype != torch.float32:
        raise ArgumentError(f"dsmem_ring: x is {str(x.dtype).removeprefix('torch.')}; the kernel moves float32 "
                            f"values - pass x.float()")
    blocks, n = x.shape
    if blocks % 2 or blocks == 0:
        raise ArgumentError(f"dsmem_ring: x has {blocks} rows; one block per row in clusters of 2 "
                            f"(__cluster_dims__(2, 1, 1)) needs an even, non-zero number of rows")
    if not 1 <= n <= 1024:
        raise ArgumentError(f"dsmem_ring: rows of {n} values; one thread per value, at most 1024 threads a block")
    out = operands.out("dsmem_ring", out, tuple(x.shape), x, "matrix", result="the exchanged rows")
    _require_hopper("dsmem_ring")
    ranks = torch.full((blocks,), -1, dtype=torch.int32, device=x.device)
    module().dsmem_ring_launch(x, out, ranks)
    return out, ranks


def dsmem_reference(x):
    """What ``dsmem_ring`` must return: the two rows of each cluster swapped."""
    return x.view(-1, 2, x.shape[1]).flip(1).reshape(x.shape)


def plan(shape, rows=128, cluster=2, clusters=64, shared=False, stages=4):
    """The tile stream of ``tile_sums`` for an (M, N) fp16 tensor, checked: a dict with the tile bytes,
    the tiles each cluster reads (``tiles``), where cluster c starts (``per_cluster`` * c) and the shared
    memory per block. ``shared``: every cluster reads the whole tensor (it stays in L2 if it fits);
    otherwise the tiles are split between the clusters (each byte read by one cluster)."""
    M, N = shape
    if cluster not in (1, 2, 4, 8):
        raise CourseError(f"cluster of {cluster} blocks: this kernel takes 1, 2, 4 or 8 (8 is the portable "
                          f"maximum on Hopper; a multicast mask names the blocks, one bit each)")
    if rows not in (8, 16, 32, 64, 128, 256):
        raise CourseError(f"rows={rows}: the box is rows x 64 fp16; rows must be a power of two from 8 to 256 "
                          f"(TMA boxes are at most 256 per dimension; 8 rows of the 8-row groups the kernel reads)")
    if not 1 <= stages <= 8:
        raise CourseError(f"stages={stages}: the ring takes 1 to 8 slots")
    if N % COLS or M % rows:
        wrong = [f"{name} = {v} is not a multiple of {d}" for name, v, d in (("M", M, rows), ("N", N, COLS)) if v % d]
        raise CourseError(f"tensor {M} x {N} in tiles of {rows} x {COLS}: " + "; ".join(wrong))
    if clusters < 1:
        raise CourseError(f"clusters={clusters}: at least one cluster")
    tile_bytes = rows * COLS * 2
    smem = stages * tile_bytes + 2 * stages * 8
    if smem > 232448:
        raise CourseError(f"{stages} stages of {rows} x {COLS} fp16 need {smem} B of shared memory per block; "
                          f"the H200 allows 232,448 B (227 KB): fewer stages or rows")
    total = (M // rows) * (N // COLS)
    tiles = total if shared else total // clusters
    if tiles < 1:
        raise CourseError(f"{total} tiles cannot be split between {clusters} clusters: a smaller `clusters`, "
                          f"or shared=True")
    return dict(M=M, N=N, rows=rows, cluster=cluster, clusters=clusters, blocks=clusters * cluster, shared=shared,
                stages=stages, tile_bytes=tile_bytes, smem=smem, tiles=tiles, per_cluster=0 if shared else tiles)


def tile_sums(x, cluster=2, multicast=True, rows=128, clusters=64, shared=False, stages=4, out=None, timeouts=None):
    """Each block of each cluster sums the columns of every tile its cluster streams (see ``plan``):
    ``out`` is (blocks, 64) float32, one row per block. ``multicast``: one TMA multicast per tile for the
    whole cluster; otherwise each block loads its own copy (same cluster shape). A wait that exceeds
    about a second counts in ``timeouts`` (an int32 counter, returned; pass one to reuse it across calls),
    which ``check_timeouts`` turns into a CourseError: a broken protocol is reported, never a hung GPU."""
    operands.check("tile_sums", "x", x, layout="rows")
    if x.dtype != torch.float16:
        raise ArgumentError(f"tile_sums: x is {str(x.dtype).removeprefix('torch.')}; the tensor map is fp16 - "
                            f"pass x.half()")
    p = plan(tuple(x.shape), rows, cluster, clusters, shared, stages)
    tma_rules.check_operand(x, [rows, COLS], "x")
    fp32 = torch.empty(0, dtype=torch.float32, device=x.device)  # out's dtype and device
    out = operands.out("tile_sums", out, (p["blocks"], COLS), fp32, "matrix", result="the column sums")
    _require_hopper("tile_sums")
    if timeouts is None:
        timeouts = torch.zeros(1, dtype=torch.int32, device=x.device)
    module().tile_sums_launch(x, out, timeouts, rows, p["tiles"], p["per_cluster"], cluster, stages, multicast,
                              MAX_WAIT_CYCLES)
    return out, timeouts


def check_timeouts(timeouts, what="tile_sums"):
    """Raise if any bounded wait of the last launch gave up (a broken protocol, reported, not hung)."""
    n = int(timeouts.item())
    if n:
        raise CourseError(f"{what}: {n} mbarrier waits gave up after about a second each: a barrier never "
                          f"completed (expected bytes that never came, or a missing arrival); the results are wrong")


def tile_sums_reference(x, cluster=2, rows=128, clusters=64, shared=False, stages=4):
    """What ``tile_sums`` must return, in float64: per cluster, the column sums of its tiles, on every
    block of the cluster."""
    p = plan(tuple(x.shape), rows, cluster, clusters, shared, stages)
    M, N = x.shape
    tiles = x.double().view(M // rows, rows, N // COLS, COLS).permute(0, 2, 1, 3).reshape(-1, rows, COLS)
    sums = torch.stack([tiles[c * p["per_cluster"]: c * p["per_cluster"] + p["tiles"]].sum((0, 1))
                        for c in range(clusters)])
    return sums.repeat_interleave(cluster, dim=0)


def traffic(shape, rows=128, cluster=2, clusters=64, shared=False, stages=4, multicast=True):
    """Bytes of one ``tile_sums`` launch, derived (no counter is read): ``l2_reads`` counts one L2 read
    per issued TMA load (a multicast is issued once per cluster and tile), ``delivered`` the bytes
    written into shared memory (the same with and without multicast), ``unique`` the distinct bytes of
    the tensor read (the HBM traffic if each is fetched from HBM once)."""
    p = plan(shape, rows, cluster, clusters, shared, stages)
    per_cluster = p["tiles"] * p["tile_bytes"]
    loads = p["clusters"] * p["tiles"] * (1 if multicast else cluster)
    return dict(loads=loads, l2_reads=loads * p["tile_bytes"], delivered=p["blocks"] * per_cluster,
                unique=per_cluster if shared else p["clusters"] * per_cluster)


# ---- what the course's two compilers expose of clusters and multicast -----------------------------------

PTX_MARKS = {  # what to look for in PTX, and what it means
    ".reqnctapercluster": "the kernel is compiled for a fixed cluster size",
    "%cluster_ctarank": "the code asks its rank in the cluster",
    "multicast::cluster": "a TMA load delivered to several blocks of the cluster",
    "mapa": "an address in another block's shared memory (distributed shared memory)",
    "barrier.cluster": "a barrier across the blocks of a cluster",
}


def marks(ptx):
    """How many times each of ``PTX_MARKS`` appears in ``ptx``."""
    return {mark: ptx.count(mark) for mark in PTX_MARKS}


def triton_cluster_evidence(num_ctas=2):
    """The course's TMA GEMM (lesson 03, ``gemm.matmul_tma_kernel``, 128 x 128 x 64, 3 stages) compiled for
    sm_90 with ``num_ctas``: the cluster marks of its PTX, its TMA loads, and whether the SASS multicasts."""
    from . import gemm
    code = gemm.compile_sm90(gemm.matmul_tma_kernel, 128, 128, 64, 3, shape=(4096, 4096, 4096), num_ctas=num_ctas)
    loads = [line.strip() for line in code.ptx.splitlines() if "cp.async.bulk.tensor" in line and ".global." in line
             and "shared::cluster.global" in line]
    sass = [line.split("\t")[-1].strip() for line in code.sass.splitlines() if "UTMALDG" in line]
    return dict(num_ctas=num_ctas, marks=marks(code.ptx), tma_loads=len(loads), first_load=loads[0] if loads else "",
                utmaldg=len(sass), utmaldg_multicast=sum("MULTICAST" in s for s in sass), origin=code.origin)


def tilelang_program(M=1024, N=128, block_M=64, cluster=2, dtype="float16"):
    """A TileLang copy in which each cluster of ``cluster`` blocks loads one tile with ``T.copy_cluster``
    and ``cluster_mask`` (every block of the cluster) and each block stores its copy to its own rows of Y."""
    from .tilelang_kernels import tilelang
    T = tilelang().language
    mask = (1 << cluster) - 1

    @T.prim_func
    def multicast_copy(X: T.Tensor((M, N), dtype), Y: T.Tensor((cluster * M, N), dtype)):
        with T.Kernel(cluster, M // block_M, threads=128, cluster_dims=cluster) as (bx, by):
            tile = T.alloc_shared((block_M, N), dtype)
            T.copy_cluster(X[by * block_M, 0], tile, cluster_mask=mask)
            T.copy(tile, Y[bx * M + by * block_M, 0])
    return multicast_copy


def tilelang_multicast_evidence(cluster=2):
    """TileLang's CUDA for ``tilelang_program`` (compiled for sm_90a, no GPU needed): the lines that
    issue the multicast and the fallback, and the PTX template TileLang's header wraps them in."""
    from .tilelang_kernels import build, tilelang
    src = build(tilelang_program(cluster=cluster), "the multicast copy").get_kernel_source()
    header = Path(tilelang().__file__).parent / "src" / "tl_templates" / "cuda" / "copy_sm90.h"
    calls = [line.strip() for line in src.splitlines() if "tma_load" in line or "block_rank_in_cluster" in line]
    return dict(cluster=cluster, multicast_calls=sum("tma_load_multicast" in c for c in calls), lines=calls,
                cluster_barrier_in_kernel=("cluster_sync" in src or "cluster_arrive" in src),
                header_has_multicast=header.exists() and "multicast::cluster" in header.read_text())


FRAMEWORKS = [  # found by reading the installed packages and compiling (see the evidence functions)
    dict(tool="Triton 3.6", feature="clusters", exposed="yes",
         how="num_ctas=2 (a launch option, also in triton.Config): the launcher sets "
             "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION and multiplies the grid by num_ctas "
             "(triton/backends/nvidia/driver.py)",
         evidence="PTX of the course's TMA GEMM with num_ctas=2: .explicitcluster, .reqnctapercluster 2, %clusterid; "
                  "its TTGIR splits the C tile over the 2 blocks (CGALayout [[0, 1]]) and keeps the A tile "
                  "in both (CGALayout [[0, 0]])"),
    dict(tool="Triton 3.6", feature="TMA multicast", exposed="no",
         how="no operation or option: no Python file of the triton package mentions multicast; Gluon's "
             "hopper.tma.async_copy_global_to_shared(desc, coord, barrier, result, pred) takes no mask",
         evidence="the same PTX: every TMA load is a plain cp.async.bulk.tensor.2d.shared::cluster.global, no "
                  ".multicast::cluster, SASS UTMALDG without MULTICAST: each block loads its own copy of the A tile "
                  "both need"),
    dict(tool="Triton 3.6", feature="distributed shared memory", exposed="no",
         how="no tl or Gluon operation maps another block's shared memory",
         evidence="no mapa and no barrier.cluster in the num_ctas=2 PTX"),
    dict(tool="TileLang 0.1.15", feature="clusters", exposed="yes",
         how="T.Kernel(..., cluster_dims=2); T.cluster_arrive / cluster_wait / cluster_sync, "
             "T.block_rank_in_cluster, T.alloc_cluster_barrier (tilelang/cuda/language/cluster.py, "
             "language/allocate.py)",
         evidence="the wrapper launches with a cluster dimension attribute (tilelang/jit/adapter/wrapper.py)"),
    dict(tool="TileLang 0.1.15", feature="TMA multicast", exposed="yes",
         how="T.copy_cluster(src, dst, cluster_mask=0b11), or T.tma_copy(..., barrier=, cluster_mask=) for "
             "split-phase use: the lowest rank in the mask issues, the others issue nothing "
             "(tilelang/language/copy_op.py)",
         evidence="compiled for sm_90a here: the kernel calls tl::tma_load_multicast(..., (uint16_t)(3), ...) on "
                  "rank 0, which tl_templates/cuda/copy_sm90.h writes as cp.async.bulk.tensor..."
                  ".multicast::cluster; the emitted kernel synchronises only its own block (__syncthreads) "
                  "between initialising its barrier and the multicast, where CUTLASS and this module use a "
                  "cluster barrier (not run here)"),
    dict(tool="TileLang 0.1.15", feature="distributed shared memory", exposed="yes",
         how="T.copy_cluster(src, dst, dst_block=rank, remote_barrier=...): a shared-to-shared copy into "
             "another block of the cluster (tilelang/language/copy_op.py)",
         evidence="documented in the package's docstring; not compiled by the course"),
]


def framework_support():
    """What Triton 3.6 and TileLang 0.1.15 expose of clusters, multicast and distributed shared memory:
    one row per (tool, feature), with how it is reached and the evidence found."""
    return [dict(row) for row in FRAMEWORKS]


def framework_table(width=100):
    """``framework_support`` as text a lesson prints."""
    import textwrap
    out = []
    for row in FRAMEWORKS:
        out.append(f"{row['tool']:16s} {row['feature']:26s} {row['exposed']}")
        for key in ("how", "evidence"):
            out += textwrap.wrap(row[key], width, initial_indent=f"    {key}: ", subsequent_indent=" " * 8)
    return "\n".join(out)
