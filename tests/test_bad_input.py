"""Bad input and odd machines: each gives a clear message or the right result, never a crash."""
import os
import subprocess
import sys
import threading

import pytest
import torch

import kernels
from kernels import DEVICE
from kernels.lab import aot, bench, mode
from kernels.lab.errors import NoGPUError, SharedMemoryError, TMAError
from kernels.ops import copy, gemm

from conftest import cpu_only, gpu_only


def _x(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("make, message", [
    (lambda: _x(64, 257)[:, 1:], "16-byte aligned base"),               # base 2 bytes past a boundary
    (lambda: _x(64, 100), "not a multiple of 16 bytes"),                  # row stride 200 B
    (lambda: _x(128, 64).t(), "last dimension must be contiguous"),       # column-major view
])
def test_tma_rules_on_the_tensor(make, message):
    with pytest.raises(TMAError, match=message):
        copy.copy_tma(make())


@pytest.mark.parametrize("block, message", [((64, 512), "1 to 256"), ((64, 4), "multiple.* of 16 bytes"),
                                            ((48, 64), "powers of two")])
def test_tma_rules_on_the_box(block, message):
    with pytest.raises(TMAError, match=message):
        copy.copy_tma(_x(256, 512), BLOCK_M=block[0], BLOCK_N=block[1])


def test_tma_copy_is_right_on_ragged_shapes():
    x = _x(300, 200)  # not multiples of the 64x128 box: TMA clips the edge tiles
    out = torch.full_like(x, float("nan"))
    assert torch.equal(copy.copy_tma(x, out=out), x)


def test_descriptor_kernel_launched_from_a_new_thread():
    # the allocator is a ContextVar: a new thread has none unless the launcher sets it
    x, result = _x(256, 256), {}
    t = threading.Thread(target=lambda: result.setdefault("y", copy.copy_tma(x)))
    t.start()
    t.join()
    assert torch.equal(result["y"], x)


@gpu_only
def test_without_the_allocator_triton_refuses():
    import triton
    from kernels.lab import alloc
    x, y, errors = _x(256, 256), _x(256, 256), []

    def raw_launch():
        try:
            copy.copy_tma_kernel[(4, 2)](x, y, 256, 256, 256, 256, BLOCK_M=64, BLOCK_N=128)
            torch.cuda.synchronize()
        except Exception as e:
            errors.append(str(e))
    t = threading.Thread(target=raw_launch)
    t.start()
    t.join()
    alloc.install()
    assert errors and "allocator" in errors[0]
    assert triton.__version__.startswith("3.6")


def test_another_triton_is_named_clearly(monkeypatch):
    import triton
    from kernels.lab import triton_internals
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    with pytest.raises(triton_internals.TritonVersionError, match="written for Triton 3.6.*Triton 3.9.0 is installed"):
        triton_internals.compile_as_launched(copy.copy_tile_kernel, (), {}, aot.SM90)


def test_gpu_without_tma_lowers_descriptors_to_plain_loads():
    x = torch.empty(8, 8, dtype=torch.float16)
    args = (x, x, 4096, 4096, 4096, 4096)
    if kernels.INTERPRET:
        pytest.skip("compiling for another target in-process needs a non-interpreter process")
    compiled = aot.compile_here(copy.copy_tma_kernel, args, dict(BLOCK_M=64, BLOCK_N=128), target=("cuda", 80, 32))
    ptx = compiled.asm["ptx"]
    assert "cp.async.bulk.tensor" not in ptx and "ld.global" in ptx


def test_mode_detection_for_a_gpu_without_tma(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert mode._detect_mode() == "gpu"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert mode._detect_mode() == "hopper"


def test_no_gpu_selects_the_interpreter_before_any_kernel():
    code = ("import os, kernels, kernels.ops.copy as c; "
            "print(kernels.MODE, os.environ.get('TRITON_INTERPRET'), type(c.copy_tile_kernel).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=True).stdout
    assert out.split() == ["cpu", "1", "InterpretedFunction"]


def test_no_gpu_and_triton_imported_first_is_a_clear_message():
    out = subprocess.run([sys.executable, "-c", "import triton.language; import kernels"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
                         | {"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode != 0 and "`import kernels` before `import triton`" in out.stderr


@cpu_only
def test_no_gpu_timing_and_recording_say_why():
    with pytest.raises(NoGPUError, match="needs a CUDA GPU"):
        bench.median_ms(lambda: None)
    out = subprocess.run([sys.executable, "-m", "kernels.tools.record"], capture_output=True, text=True)
    assert out.returncode != 0 and "needs a CUDA GPU" in out.stderr


@gpu_only
def test_shared_memory_overflow_is_a_clear_message():
    a = _x(1024, 1024)
    with pytest.raises(SharedMemoryError, match="does not fit.*KiB of shared memory asked"):
        gemm.matmul(a, a, 256, 256, 128, stages=4)


def test_matmul_shape_mismatch():
    with pytest.raises(ValueError, match=r"\(M, K\) @ \(K, N\)"):
        gemm.matmul(_x(64, 32), _x(64, 32))


def test_tilelang_config_that_cannot_compile_says_why():
    from kernels.ops import tilelang_kernels as tk
    from kernels.lab.errors import CourseError
    with pytest.raises(CourseError, match="TileLang cannot compile gemm .*warp partition"):
        tk.compile("gemm", M=1024, N=1024, K=1024, threads=384)  # 12 warps cannot tile 128 x 256


@cpu_only
def test_tilelang_kernels_without_a_hopper_gpu_say_why():
    from kernels.ops import tilelang_kernels as tk
    with pytest.raises(NoGPUError, match="only on a Hopper GPU"):
        tk.gemm(_x(128, 64), _x(64, 128))


@gpu_only
def test_tilelang_gemm_refuses_non_fp16_or_strided_inputs():
    from kernels.ops import tilelang_kernels as tk
    from kernels.lab.errors import CourseError
    if kernels.MODE != "hopper":
        pytest.skip("TileLang kernels here run on Hopper only")
    with pytest.raises(CourseError, match="contiguous fp16"):
        tk.gemm(_x(128, 64).t(), _x(128, 128))
    with pytest.raises(CourseError, match="contiguous fp16"):
        tk.gemm(_x(128, 64, dtype=torch.float32), _x(64, 128, dtype=torch.float32))
