"""Lesson 02: asynchronous copies. The pointer GEMM over stage counts against cuBLAS, what the
stage count changes in its code, and a copy loop pipelined by tl.range."""
import matplotlib.pyplot as plt
import torch

from ..lab import bench, measure, plots, smem
from ..lab.results import record
from ..lab.widgets import Widget
from ..ops import copy, gemm

LESSON = "02"
SHAPE = (8192, 8192, 8192)
TILE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)
STAGES = [1, 2, 3, 4]
COPY_SHAPE = (16384, 16384)


def compile_gemm(BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=SHAPE):
    """The sm_90 code of the pointer GEMM for this configuration, named after it."""
    compiled = gemm.compile_sm90(gemm.matmul_kernel, BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=shape)
    compiled.name = f"{BLOCK_M}x{BLOCK_N}x{BLOCK_K}, {stages} stage{'s' if stages > 1 else ''}"
    return compiled


def budget(BLOCK_M, BLOCK_N, BLOCK_K, stages, compiled=None):
    return smem.Budget(stages, smem.gemm_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K),
                       compiled=compiled.shared if compiled else None)


def measure_stages(tile=TILE, stages=STAGES):
    """cuBLAS and the pointer GEMM at each stage count, interleaved, 8192^3 fp16."""
    a, b, c = bench.gemm_operands(*SHAPE)
    fns = {"cublas_gemm": lambda: torch.matmul(a, b, out=c)}
    for s in stages:
        fns[s] = (lambda s=s: gemm.matmul(a, b, stages=s, out=c, **tile))
    ms = bench.checked_interleaved(fns, c, torch.matmul(a, b), tol=1e-2)
    return [record("cublas_gemm" if n == "cublas_gemm" else "gemm_pointer", t, shape=SHAPE,
                   flops=bench.gemm_flops(*SHAPE), config={} if n == "cublas_gemm" else {**tile, "stages": n},
                   baseline=None if n == "cublas_gemm" else "cublas_gemm") for n, t in ms.items()]


def measure_copy_loop():
    """torch's copy, the lesson-01 tile copy and the tl.range copy loop at each stage count, interleaved."""
    x = bench.randn(*COPY_SHAPE)
    y = torch.empty_like(x)
    fns = {("torch_copy", None): lambda: y.copy_(x), ("copy_tile", None): lambda: copy.copy_tile(x, out=y)}
    for s in STAGES:
        fns[("copy_loop", s)] = (lambda s=s: copy.copy_loop(x, out=y, stages=s))
    ms = bench.checked_interleaved(fns, y, x)
    return [record(name, t, shape=COPY_SHAPE, nbytes=bench.copy_bytes(x), config={"stages": s} if s else {},
                   baseline=None if name == "torch_copy" else "torch_copy") for (name, s), t in ms.items()]


def results(run):
    """A run of this lesson (see RUNS): measured now on a GPU, recorded otherwise, with its label."""
    return measure.run(LESSON, run, RUNS[run])


def stages_result():
    """({stages: TFLOP/s} of the pointer GEMM at TILE, cuBLAS TFLOP/s, label)."""
    run = results("stages")
    pointer = {r["config"]["stages"]: r["tflops"] for r in run.select("gemm_pointer", **TILE)}
    return dict(sorted(pointer.items())), run.find("cublas_gemm")["tflops"], run.label


def copy_loop_result():
    """{variant: GB/s} of the copy-loop run, and the label."""
    run = results("copy_loop")
    return {r["name"] + (f", {r['config']['stages']} stage{'s' if r['config']['stages'] > 1 else ''}"
                         if "stages" in r["config"] else ""): r["gbps"] for r in run}, run.label


class GemmStages(Widget):
    """Shared-memory budget, the async copies in the code, and TFLOP/s against cuBLAS."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64, 128], stages=STAGES)
    defaults = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, stages=3)
    title, base_label = "8192^3 fp16", "cuBLAS"

    def compile(self, cfg):
        return compile_gemm(**cfg)

    def budget(self, cfg, compiled):
        return budget(**cfg, compiled=compiled)

    def evidence(self, cfg, compiled):
        n = compiled.counts()
        return [f"sm_90 code: {n['cp.async']} cp.async (LDGSTS), {n['ld.global']} plain ld.global, "
                f"{n['cp.async.wait_group']} cp.async.wait_group, {n['wgmma.mma_async']} wgmma.mma_async"]

    def query(self, cfg):
        return measure.Query(LESSON, "sweep", "gemm_pointer", cfg, SHAPE,
                             lambda a, b, c: gemm.matmul(a, b, **cfg, out=c))

    def label(self, cfg):
        return f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}, {cfg['stages']} stages"


gemm_stages = GemmStages()


def plot_stages(pointer, cublas, where):
    ax = plots.throughput(list(pointer), {"pointer GEMM 128x256x64": list(pointer.values())}, "stages",
                          "TFLOP/s", baseline=("cuBLAS", cublas), title=f"8192^3 fp16 - {where}")
    ax.set_ylim(0, cublas * 1.15)
    plt.show()


RUNS = {"stages": measure_stages, "copy_loop": measure_copy_loop, "sweep": gemm_stages.sweep}
