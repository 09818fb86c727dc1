"""CUDA C++ written by hand (lesson 06): compiled for sm_90a with ``nvcc`` and read as PTX and SASS on
any machine with the CUDA toolkit, built and launched through torch's ``cpp_extension`` on a GPU.

A lesson's CUDA comes in two parts: ``kernels``, plain CUDA (``<cuda.h>`` and inline PTX, no torch), which
``compile_sm90a`` turns into PTX and a cubin anywhere; and ``launchers``, the host code that builds tensor
maps and launches the kernels on torch tensors, which only ``build`` compiles (with the kernels), on a GPU.

What lesson 06's extensions share is written once here and pasted into their sources: ``TMA_DEVICE`` (device
helpers, one PTX instruction each) into ``kernels``, ``TENSOR_MAP_HOST`` (finding and calling the driver's
tensor-map encoder) into ``launchers``; ``build`` puts ``TORCH_HOST``, the few torch headers they use, first."""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import isa
from .errors import CourseError, NoGPUError
from .mode import LIVE

ARCH = "sm_90a"  # wgmma, setmaxnreg and TMA multicast need the "a" (architecture-specific) target
CACHE = Path(os.environ.get("COURSE_CUDA_CACHE", Path(tempfile.gettempdir()) / "course-cuda"))


# ---- the CUDA lesson 06's extensions share (kernels/ops/tma_cuda.py, banks_cuda.py, cluster_cuda.py) -------

# Device helpers, one PTX instruction each (NVIDIA, Parallel Thread Execution ISA, the sections named): plain CUDA
# for a module's ``kernels``, pasted after ``#include <cstdint>``, inside the module's namespace if it has one.
# Only helpers that compile to the same PTX in every kernel that calls them (the lessons read that PTX). The TMA
# load stays in each module: tma_cuda hands the tensor map to the asm as an integer, cluster_cuda as a pointer,
# and nvcc emits different PTX around the two. So do the bounded waits, which differ (a %globaltimer budget in
# tma_cuda, clock64 budgets in banks_cuda and cluster_cuda).
TMA_DEVICE = r"""
// ---- shared by lesson 06's kernels (kernels/lab/cuda.py, TMA_DEVICE) ----------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));  // PTX wants shared-window addresses
}

// PTX ISA, mbarrier.init: the barrier waits for `count` arrivals per phase; phase 0 is open now.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// PTX ISA, membar/fence (fence.mbarrier_init): a release, at cluster scope, of this thread's mbarrier.inits:
// other blocks of a cluster see the barriers initialised once they acquire (barrier.cluster.wait.acquire,
// lesson 06's clusters). A block alone whose initialising thread issues the copy does not need it (the copy
// reaches its barrier through the generic proxy: PTX ISA, cp.async.bulk.tensor); one init sequence for all.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// PTX ISA, mbarrier.arrive (.expect_tx): this thread's one arrival, and "`bytes` more are coming".
// The phase completes when every arrival is in AND the pending byte count is back to zero: the count
// must be exactly what the copies deliver (a whole box, even where TMA fills out-of-bounds with zeros).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

// PTX ISA, mbarrier.test_wait/try_wait (.parity): true once the phase of parity `phase` has completed.
// try_wait may suspend the thread for a while in hardware before answering false.
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t phase) {
  uint32_t done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(done) : "r"(bar), "r"(phase) : "memory");
  return done;
}
// ---- (end of TMA_DEVICE)
"""

# The torch a module's ``launchers`` use, and no more: nvcc compiles them with the kernels, and all of ATen
# (torch/extension.h, or the torch/types.h that load_inline would add) made a build take 85-90 s on the H200,
# these 17-21 s (2026-12-01, the binding file compiling beside it in as long).
TORCH_HOST = r"""
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>   // C10_CUDA_CHECK, C10_CUDA_KERNEL_LAUNCH_CHECK
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>      // (not ATen/cuda/CUDAContext.h, which pulls in cuSPARSE and cuBLAS headers)
namespace torch { using namespace at; }  // torch::Tensor, torch::kHalf, as torch/types.h names them
"""

# Host C++ for a module's ``launchers``: the driver's tensor-map encoder found through the runtime (CUDA Runtime
# API, cudaGetDriverEntryPointByVersion), and a 2D map over a row-major torch tensor encoded with it (CUDA Driver
# API, cuTensorMapEncodeTiled). ``static``: each extension is one translation unit.
TENSOR_MAP_HOST = r"""
// ---- shared by lesson 06's extensions (kernels/lab/cuda.py, TENSOR_MAP_HOST) -----------------------------
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled_v12000

// The driver's encoder, reached through the runtime: no -lcuda at link time. Looked up once.
static PFN_cuTensorMapEncodeTiled_v12000 course_encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    TORCH_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && p,
                "cuTensorMapEncodeTiled is not in this driver (CUDA 12.0 or newer needed; ", cudaGetErrorString(e),
                ", query result ", (int)found, ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2D map of t (rows x cols, row stride in bytes), read and written box_rows x box_cols at a time. Dimensions
// go innermost first; the strides name dimensions 1.. only, in bytes. Out-of-bounds elements of a box load as
// zeros and are dropped on store.
static CUtensorMap course_map_2d(const torch::Tensor& t, int64_t box_rows, int64_t box_cols, CUtensorMapDataType type,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_promotion) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  const cuuint64_t strides[1] = {(cuuint64_t)(t.stride(0) * t.element_size())};
  const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = course_encode_tiled()(&map, type, 2, t.data_ptr(), dims, strides, box, element_strides,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2_promotion,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled refused the map (CUresult ", (int)r, ")");
  return map;
}
// ---- (end of TENSOR_MAP_HOST)
"""


def nvcc():
    """Path of ``nvcc``: on PATH, or under CUDA_HOME / /usr/local/cuda; a clear message if absent."""
    for candidate in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise CourseError("nvcc not found: lesson 06 compiles CUDA C++ with the CUDA toolkit's nvcc (12.3 or newer for "
                      "sm_90a); install the toolkit and put its bin/ on PATH (see `make doctor`)")


def kernel_ptx(ptx, name):
    """The PTX of one kernel (``.entry name``) of a module's PTX."""
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:] if end < 0 else ptx[start:end]


@dataclass
class CudaCode:
    """Kernels compiled for sm_90a: the PTX nvcc wrote and the cubin ptxas made of it (SASS on demand)."""
    name: str
    ptx: str
    cubin: bytes

    @property
    def entries(self):
        """The kernels' (mangled) names, in the PTX's order."""
        return re.findall(r"^\.visible \.entry (\w+)\(", self.ptx, re.M)

    def kernel_ptx(self, name):
        """The PTX of one kernel (``.entry name``) of the module."""
        return kernel_ptx(self.ptx, name)

    def kernel_sass(self, name):
        """The SASS of one kernel: Triton's get_sass (it ships cuobjdump/nvdisasm) stops after the first
        function of a cubin, so each kernel is asked for by name."""
        from triton.tools.disasm import get_sass
        return get_sass(self.cubin, fun=name)

    @cached_property
    def sass(self):
        """SASS of every kernel of the module."""
        from triton.tools.disasm import get_sass
        return "".join(self.kernel_sass(fun) for fun in self.entries) or get_sass(self.cubin)

    def counts(self, sass=True, name=None):
        """PTX and SASS instruction counts (``isa``) of the module, or of its kernel ``name``."""
        c = isa.count_ptx(self.ptx if name is None else self.kernel_ptx(name))
        if sass:
            c.update(isa.count_sass(self.sass if name is None else self.kernel_sass(name)))
        return c


def _run(cmd, what):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise CourseError(f"{what} failed:\n" + (done.stderr or done.stdout).strip()[-3000:])


def built_once(folder, outputs, make):
    """The files ``outputs`` in ``folder`` (a cache keyed by content), made by ``make(tmp)`` in a folder of this
    process's own and renamed into place, the last one last: whoever finds the last finds them all whole. Built in
    place, two test workers building one source raced: one ran the other's half-written program ("Text file busy",
    H100, 2026-12-06)."""
    if (folder / outputs[-1]).exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        make(Path(tmp))
        for name in outputs:
            os.replace(Path(tmp) / name, folder / name)
    return folder


def compile_sm90a(name, kernels, flags=()):
    """PTX and cubin of ``kernels`` (plain CUDA source) for sm_90a, cached by content."""
    key = hashlib.sha256((kernels + " ".join(flags) + ARCH).encode()).hexdigest()[:16]

    def make(tmp):
        src = tmp / f"{name}.cu"
        src.write_text(kernels)
        base = [nvcc(), f"-arch={ARCH}", "-O3", "-std=c++17", "-lineinfo", *flags]
        _run([*base, "-ptx", str(src), "-o", str(tmp / f"{name}.ptx")], f"nvcc -ptx of {name}")
        _run([*base, "-cubin", str(src), "-o", str(tmp / f"{name}.cubin")], f"nvcc -cubin of {name}")
    folder = built_once(CACHE / f"{name}-{key}", [f"{name}.cu", f"{name}.ptx", f"{name}.cubin"], make)
    return CudaCode(name, (folder / f"{name}.ptx").read_text(), (folder / f"{name}.cubin").read_bytes())


def build(name, kernels, launchers, functions, flags=()):
    """The Python module of ``kernels`` + ``launchers`` (torch.utils.cpp_extension.load_inline), with
    ``functions`` bound: GPU only. Built once per content; later calls load it from torch's cache."""
    if not LIVE:
        raise NoGPUError(f"{name}: building and launching CUDA needs a GPU; without one the lesson reads the "
                         "PTX and SASS nvcc compiles here")
    from torch.utils.cpp_extension import load_inline
    cuda_source = kernels + "\n" + TORCH_HOST + launchers
    binding = "#include <torch/python.h>\n" + "\n".join(f"{sig};" for sig in functions.values())
    key = f"{name}_" + hashlib.sha256((cuda_source + binding + " ".join(flags)).encode()).hexdigest()[:12]
    # kept per process: load_inline on a built module still rewrites its sources and asks ninja, about half a
    # millisecond of host time per call (it was inside lesson 06's multicast timings until 2026-12-01)
    if key not in _BUILT:
        # no_implicit_headers: the .cu gets TORCH_HOST instead of all of ATen, the binding the Python header only
        _BUILT[key] = load_inline(name=key, cpp_sources=[binding], cuda_sources=[cuda_source], functions=list(functions),
                                  extra_cuda_cflags=[f"-arch={ARCH}", "-O3", "-std=c++17", *flags],
                                  no_implicit_headers=True, verbose=False)
    return _BUILT[key]


_BUILT = {}  # extension name and content key -> the loaded module
