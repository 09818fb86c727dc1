"""Every launcher checks what it is handed before anything reaches Triton - ``out`` (shape, dtype,
device, layout) and where its inputs are - and a launch that overflows shared memory becomes the
course's message. Without the checks a short ``out`` is written past its end (seen on the H200, and
here the interpreter corrupts the heap) and a tensor on the wrong device gets Triton's own message."""
import re

import pytest
import torch
from triton.runtime.errors import OutOfResources

from kernels import DEVICE
from kernels.lab import operands
from kernels.lab.errors import ArgumentError, SharedMemoryError, TMAError
from kernels.ops import copy, gemm, latency, scale, seed_gemm, transpose

from conftest import cpu_only, gpu_only

# a device the kernels do not run on in this mode: with no GPU they run on CPU tensors (interpreter)
ELSEWHERE, MOVE = ("meta", ".cpu()") if DEVICE == "cpu" else ("cpu", ".cuda()")
M, N, K = 64, 128, 32  # M != N, so a transposed out has the wrong shape too


def _randn(*shape, dtype=torch.float16, device=DEVICE):
    return torch.randn(*shape, dtype=dtype, device=device)


class Case:
    """A launcher called as ``call(*inputs, out=...)``: its name (as its messages say it), its inputs'
    names and shapes, what it computes and its shape, and the layout its kernel assumes of ``out``
    ("tma": the TMA rules decide; None: any strides, the kernel is handed them all)."""

    def __init__(self, name, call, inputs, result, shape, ref, layout, variant=""):
        self.name, self.call, self.inputs, self.result, self.shape = name, call, inputs, result, shape
        self.ref, self.layout, self.variant = ref, layout, variant

    def make(self, device=DEVICE):
        return [_randn(*shape, device=device) for shape in self.inputs.values()]

    def __repr__(self):
        return f"{self.name}/{self.variant}" if self.variant else self.name


def _copy(name, fn, layout, variant=""):
    return Case(name, fn, {"x": (M, N)}, "the copy", (M, N), lambda x: x, layout, variant)


def _transpose(name, fn, layout):
    return Case(name, fn, {"x": (M, N)}, "the transpose", (N, M), lambda x: x.t(), layout)


def _ab():
    return _randn(M, K), _randn(K, N)


def _gemm(name, fn, layout, variant=""):
    return Case(name, fn, {"a": (M, K), "b": (K, N)}, "the product", (M, N),
                lambda a, b: (a.float() @ b.float()).half(), layout, variant)


CASES = [
    _copy("copy_tile", copy.copy_tile, "rows"),
    _copy("copy_tma", copy.copy_tma, "tma"),
    _copy("copy_elem", copy.copy_elem, "flat"),
    _copy("copy_rows", copy.copy_rows, "matrix"),
    _copy("copy_cols", copy.copy_cols, "matrix"),
    _copy("copy_loop", copy.copy_loop, "rows"),
    _copy("copy_tma_loop", copy.copy_tma_loop, "tma"),
    _copy("copy_tma_loop", lambda x, out=None: copy.copy_tma_loop(x, out=out, descriptor="host"), "tma", "host"),
    Case("scale", lambda x, out=None: scale.scale(1.5, x, out=out), {"x": (M, N)}, "the result", (M, N),
         lambda x: 1.5 * x.float(), "flat"),
    _transpose("transpose_tile", transpose.transpose_tile, "rows"),
    _transpose("transpose_tma", transpose.transpose_tma, "tma"),
    _gemm("matmul", lambda a, b, out=None: gemm.matmul(a, b, 64, 64, 32, out=out), None),
    _gemm("matmul_tma", lambda a, b, out=None: gemm.matmul_tma(a, b, 64, 64, 32, out=out), "tma"),
    _gemm("matmul_tma_persistent", lambda a, b, out=None: gemm.matmul_tma_persistent(a, b, 64, 64, 32, out=out), "tma"),
    _gemm("matmul_tma_persistent", lambda a, b, out=None: gemm.matmul_tma_persistent(a, b, 64, 64, 32, tma_store=False,
                                                                                     out=out), "tma", "pointer store"),
    _gemm("matmul_tma_probe", lambda a, b, out=None: gemm.matmul_tma_probe(a, b, 2, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
                                                                           out=out), "tma"),
]


def _equal(case, got, inputs):
    return torch.allclose(got.float(), case.ref(*inputs).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_right_out_is_written(case):
    inputs = case.make()
    out = torch.full(case.shape, -6144.0, dtype=torch.float16, device=DEVICE)
    assert case.call(*inputs, out=out) is out
    assert _equal(case, out, inputs)


@pytest.mark.parametrize("case", CASES, ids=repr)
@pytest.mark.parametrize("shape", ["short", "transposed"])
def test_an_out_of_the_wrong_shape_is_refused(case, shape):
    right = case.shape
    wrong = (right[0] // 2, right[1]) if shape == "short" else right[::-1]
    out = torch.full(wrong, -6144.0, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ArgumentError, match=rf"^{case.name}: out has shape \({wrong[0]}, {wrong[1]}\) but "
                                            rf"{case.result} is \({right[0]}, {right[1]}\)$"):
        case.call(*case.make(), out=out)
    assert (out == -6144).all()  # and nothing was written


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_an_out_of_the_wrong_dtype_is_refused(case):
    out = torch.empty(case.shape, dtype=torch.float32, device=DEVICE)
    with pytest.raises(ArgumentError, match=f"^{case.name}: out is float32 but {case.result} is float16"):
        case.call(*case.make(), out=out)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_an_out_on_another_device_is_refused(case):
    out = torch.empty(case.shape, dtype=torch.float16, device=ELSEWHERE)
    with pytest.raises(ArgumentError, match=f"^{case.name}: out is on {ELSEWHERE} but the inputs are on {DEVICE}"):
        case.call(*case.make(), out=out)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_an_out_laid_out_otherwise_is_refused_where_the_kernel_assumes_a_layout(case):
    rows, cols = case.shape
    out = torch.full((cols, rows), -6144.0, dtype=torch.float16, device=DEVICE).t()  # right shape, column-major
    inputs = case.make()
    if case.layout is None:  # the pointer GEMM is handed all of out's strides: column-major is fine
        case.call(*inputs, out=out)
        assert _equal(case, out, inputs)
    elif case.layout == "tma":
        with pytest.raises(TMAError, match="last dimension must be contiguous"):
            case.call(*inputs, out=out)
    else:
        with pytest.raises(ArgumentError, match=rf"^{case.name}: out has strides \(1, {rows}\); the kernel writes "
                                                f"{re.escape(operands.LAYOUTS[case.layout])}"):
            case.call(*inputs, out=out)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_an_input_on_another_device_is_refused(case):
    for i, name in enumerate(case.inputs):
        inputs = case.make()
        inputs[i] = inputs[i].to(ELSEWHERE)
        with pytest.raises(ArgumentError,
                           match=rf"^{case.name}: {name} is on {ELSEWHERE}, .* move it with {re.escape(MOVE)}$"):
            case.call(*inputs)


@pytest.mark.parametrize("case", [c for c in CASES if c.layout not in (None, "tma")], ids=repr)
def test_an_input_laid_out_otherwise_is_refused_where_the_kernel_assumes_a_layout(case):
    x = _randn(N, M).t()  # (M, N), column-major
    layout = re.escape(operands.LAYOUTS[case.layout])
    with pytest.raises(ArgumentError, match=rf"^{case.name}: x has shape \({M}, {N}\) and strides \(1, {M}\); "
                                            rf"the kernel reads {layout} - pass x.contiguous\(\)"):
        case.call(x)


@cpu_only
def test_on_a_gpu_a_cpu_tensor_is_told_to_move(monkeypatch):
    monkeypatch.setattr(operands, "_GPU", True)  # the check as a GPU run makes it
    with pytest.raises(ArgumentError,
                       match=r"^matmul: a is on cpu, the kernels run on cuda:0 - move it with \.cuda\(\)$"):
        gemm.matmul(*_ab())


def test_the_chase_and_the_article_gemm_check_where_their_inputs_are():
    chain = latency.random_cycle(64).to(ELSEWHERE)
    with pytest.raises(ArgumentError, match=f"^chase: chain is on {ELSEWHERE}"):
        latency.chase(chain, 0, 10)
    with pytest.raises(ArgumentError, match=f"^seed_gemm: b is on {ELSEWHERE}"):
        seed_gemm.seed_gemm(_randn(128, 64), _randn(64, 128, device=ELSEWHERE))


def test_tilelang_launchers_check_out(monkeypatch):
    from kernels.ops import tilelang_kernels as tk
    launched = []
    monkeypatch.setattr(tk, "_require_gpu", lambda *ts: None)  # no Hopper GPU needed to reach the out check
    monkeypatch.setattr(tk, "compile", lambda kind, **cfg: lambda *args: launched.append(kind))
    with pytest.raises(ArgumentError,
                       match=r"^tilelang_kernels.gemm: out has shape \(64, 64\) but the product is \(64, 128\)"):
        tk.gemm(_randn(M, K), _randn(K, N), out=_randn(64, 64))
    with pytest.raises(ArgumentError, match="^tilelang_kernels.copy: out is float32 but the copy is float16"):
        tk.copy(_randn(M, N), out=_randn(M, N, dtype=torch.float32))
    with pytest.raises(ArgumentError, match="^tilelang_kernels.copy: out has strides .* a contiguous 2D tensor"):
        tk.copy(_randn(M, N), out=_randn(N, M).t())
    assert not launched


# ---- shared memory: Triton's OutOfResources, raised by the launch, becomes the course's message ----

class _Overflowing:
    """Stands in for a kernel whose launch finds it needs more shared memory than the GPU has (the
    interpreter has no limit, so in CPU mode this is how a launch that overflows is made)."""

    def __init__(self, resource="shared memory"):
        self.resource = resource

    def __getitem__(self, grid):
        def launch(*args, **meta):
            raise OutOfResources(300 * 1024, 232_448, self.resource)
        return launch


# (launcher call, module, kernel it launches, the configuration named, the model's parts)
OVERFLOWS = [
    (lambda: gemm.matmul(*_ab(), 64, 64, 32, stages=4), gemm, "matmul_kernel",
     "64x64x32 with 4 stages", r"4 x 8.0 KiB = 32.0 KiB"),
    (lambda: gemm.matmul_tma(*_ab(), 64, 64, 32, stages=4), gemm, "matmul_tma_kernel",
     "64x64x32 with 4 stages", r"4 x 8.0 KiB \+ 8.0 KiB output tile = 40.0 KiB"),
    (lambda: gemm.matmul_tma_persistent(*_ab(), 64, 64, 32, stages=4), gemm,
     "matmul_tma_persistent_kernel", "64x64x32 with 4 stages", r"4 x 8.0 KiB \+ 8.0 KiB output tile = 40.0 KiB"),
    (lambda: gemm.matmul_tma_persistent(*_ab(), 64, 64, 32, stages=4, tma_store=False), gemm,
     "matmul_tma_persistent_kernel", "64x64x32 with 4 stages", r"4 x 8.0 KiB = 32.0 KiB"),
    (lambda: gemm.matmul_tma_probe(*_ab(), 4, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32), gemm,
     "matmul_tma_probe_kernel", "64x64x32 with 4 stages", r"4 x 8.0 KiB \+ 8.0 KiB output tile = 40.0 KiB"),
    (lambda: copy.copy_tma(_randn(M, N)), copy, "copy_tma_kernel", "64x128 tiles", r"1 x 16.0 KiB = 16.0 KiB"),
    (lambda: copy.copy_loop(_randn(M, N), stages=4), copy, "copy_loop_kernel", "64x128 tiles with 4 stages",
     r"3 x 16.0 KiB = 48.0 KiB"),
    (lambda: copy.copy_tma_loop(_randn(M, N), stages=4), copy, "copy_tma_loop_kernel", "64x128 tiles with 4 stages",
     r"4 x 16.0 KiB = 64.0 KiB"),
    (lambda: copy.copy_tma_loop(_randn(M, N), stages=4, descriptor="host"), copy, "copy_tma_host_loop_kernel",
     "64x128 tiles with 4 stages", r"4 x 16.0 KiB = 64.0 KiB"),
    (lambda: transpose.transpose_tile(_randn(M, N)), transpose, "transpose_tile_kernel", "64x64 tiles",
     r"1 x 8.0 KiB = 8.0 KiB"),
    (lambda: transpose.transpose_tma(_randn(M, N)), transpose, "transpose_tma_kernel", "64x64 tiles",
     r"1 x 8.0 KiB = 8.0 KiB"),
]


@pytest.mark.parametrize("launch, module, kernel, config, model", OVERFLOWS, ids=[o[2] for o in OVERFLOWS])
def test_a_launch_that_overflows_shared_memory_gets_the_course_message(monkeypatch, launch, module, kernel, config,
                                                                       model):
    monkeypatch.setattr(module, kernel, _Overflowing())
    with pytest.raises(SharedMemoryError, match=rf"^{config} does not fit: 300.0 KiB of shared memory asked, 227.0 KiB "
                                                rf"per block on this GPU \(model: {model}\) - use fewer stages"):
        launch()


def test_other_resources_are_left_as_triton_says_them(monkeypatch):
    monkeypatch.setattr(gemm, "matmul_tma_persistent_kernel", _Overflowing("threads"))
    with pytest.raises(OutOfResources, match="out of resource: threads"):
        gemm.matmul_tma_persistent(*_ab(), 64, 64, 32)


# configurations whose sm_90 code asks for more than the 227 KiB a Hopper block may have (compiled.shared of
# aot.compile_sm90, checked with no GPU): on a GPU their launch raises OutOfResources
REAL_OVERFLOWS = {
    "matmul fp32 256x256x128 4 stages": lambda a: gemm.matmul(a, a, 256, 256, 128, stages=4),
    "matmul_tma fp32 256x256x128 4 stages": lambda a: gemm.matmul_tma(a, a, 256, 256, 128, stages=4),
    "matmul_tma_persistent fp32 128x256x64 4 stages":
        lambda a: gemm.matmul_tma_persistent(a, a, 128, 256, 64, stages=4),
    "matmul_tma_persistent fp32 128x256x64 4 stages, pointer store":
        lambda a: gemm.matmul_tma_persistent(a, a, 128, 256, 64, stages=4, tma_store=False),
    "matmul_tma_probe fp32 128x256x64 4 stages": lambda a: gemm.matmul_tma_probe(a, a, 4),
    "copy_loop fp16 256x256 4 stages": lambda a: copy.copy_loop(a.half(), BLOCK_M=256, BLOCK_N=256, stages=4),
    "copy_tma_loop fp32 128x256 4 stages": lambda a: copy.copy_tma_loop(a, BLOCK_M=128, BLOCK_N=256, stages=4),
    "copy_tma fp32 256x256": lambda a: copy.copy_tma(a, BLOCK_M=256, BLOCK_N=256),
    "transpose_tma fp32 256x256": lambda a: transpose.transpose_tma(a, BLOCK_M=256, BLOCK_N=256),
}


@gpu_only
@pytest.mark.parametrize("name", REAL_OVERFLOWS)
def test_real_overflows_on_this_gpu_get_the_course_message(name):
    a = _randn(1024, 1024, dtype=torch.float32)
    with pytest.raises(SharedMemoryError, match="does not fit: .* KiB of shared memory asked, .* per block"):
        REAL_OVERFLOWS[name](a)


def test_the_sm_count_of_a_gpu_is_asked_once(monkeypatch):
    from types import SimpleNamespace
    from kernels.lab import mode
    asked = []
    monkeypatch.setattr(mode, "_SMS", {}, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: asked.append(i) or SimpleNamespace(multi_processor_count=132))
    on_gpu = SimpleNamespace(is_cuda=True, device="cuda:0", get_device=lambda: 0)  # what sm_count may read of one
    assert [mode.sm_count(on_gpu) for _ in range(3)] == [132] * 3 and asked == [0]
    assert mode.sm_count(torch.empty(1)) == 4  # the interpreter's stand-in grid
