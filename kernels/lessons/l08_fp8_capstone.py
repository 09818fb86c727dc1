"""Lesson 08, the capstone: an FP8 (e4m3) GEMM on Hopper, TMA-fed, pipelined and persistent, with per-tensor
scales, against cuBLASLt's FP8 GEMM (torch._scaled_mm) in the same run."""
import dataclasses
import functools
import math

import torch
import triton
import triton.language as tl

from ..lab import bench, measure, results as recorded_results, smem
from ..lab.widgets import REFUSALS, Widget
from . import any_shape
from ..ops import gemm_fp8
from ..ops.gemm import grouped_tile
from .l07_shapes_and_waves import epilogues, stored_in_halves

LESSON = "08"
NEEDS = "hopper"  # e4m3 wgmma is sm_90: other GPUs have no FP8 tensor cores of this kind (or lower them)
BAR_SHAPE = (8192, 8192, 4096)
SHAPES = [(8192, 8192, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (2048, 2048, 2048),
          (16384, 8192, 4096)]
TILES = [(128, 256, 128, 8), (128, 128, 128, 8), (128, 128, 128, 4), (64, 256, 128, 4)]  # BM, BN, BK, warps
STAGES = (3, 4, 5)
CANDIDATES = 3  # the screen's fastest configurations timed again, side by side, per shape (measure_best)


def space():
    """[config]: FP8 tiles x stages that fit one block (a stage holds BM x BK + BN x BK bytes; the bf16
    output tile is staged for the TMA store, whole or in two halves as lesson 07's ``epilogues``), persistent
    or one tile per program."""
    out = []
    for m, n, k, w in TILES:
        for s in STAGES:
            halves = stored_in_halves(m, n, k, s, elem_bytes=1)
            if halves is None:
                continue
            for extra in epilogues(n, halves):
                for persistent in (True, False):
                    out.append(dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, num_warps=w, stages=s, persistent=persistent,
                                    **extra))
    # no warp_specialize: Triton 3.6 compiles these loops the same with and without it (finding "warp-specialize")
    return out


def operands(shape):
    """A (M, K) and B^T (N, K) quantized to e4m3 from fresh normal data, with their scales, and a bf16 C."""
    M, N, K = shape
    a, sa = gemm_fp8.quantize(torch.randn(M, K, device="cuda"))
    bt, sb = gemm_fp8.quantize(torch.randn(N, K, device="cuda"))
    return a, bt, sa, sb, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)


def measure_search():
    return list(_searched())


@functools.lru_cache(maxsize=None)
def _searched():
    """Every configuration at every shape, checked against the fp32 product of the same e4m3 values, then
    timed once in turn (``do_bench`` median over 30 ms) beside torch._scaled_mm with fast accumulation."""
    records = []
    for shape in SHAPES:
        a, bt, sa, sb, c = operands(shape)
        ref = gemm_fp8.reference(a, bt, sa, sb)
        fns = {"scaled_mm": lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, out=c)}
        cfgs = {"scaled_mm": ("scaled_mm", {"fast_accum": True})}
        screen = measure.screened([("gemm_fp8", cfg, functools.partial(gemm_fp8.plan, a, bt, sa, sb, c, **cfg))
                                   for cfg in space()], c, ref, 2e-2, REFUSALS, f" at {shape}")  # plans: launch only
        fns.update(screen[0])
        cfgs.update(screen[1])
        ms = bench.interleaved_ms(fns, rounds=1, warmup=10, rep=30)
        records += [recorded_results.record(cfgs[k][0], t, shape=shape, dtype="float8_e4m3fn", config=cfgs[k][1],
                                            flops=bench.gemm_flops(*shape),
                                            baseline=None if k == "scaled_mm" else "scaled_mm")
                    for k, t in ms.items()]
    return tuple(records)


def search():
    """The search run: the recorded screen wherever one is recorded (it takes minutes; redo it with
    ``python -m kernels.tools.record 08:search``), else measured now on a Hopper GPU, as lesson 07 does."""
    store = recorded_results.recorded()
    found = store.select(LESSON, "search")
    if found:
        return measure.Run(found, measure.recorded_label(store, found))
    return measure.run(LESSON, "search", measure_search, NEEDS)


def candidates(records, shape, top=CANDIDATES):
    """The ``top`` fastest configurations of the screen at ``shape``, fastest first."""
    rs = sorted((r for r in records if r["name"] == "gemm_fp8" and tuple(r["shape"]) == tuple(shape)
                 and r["config"] in space()), key=lambda r: r["ms"])
    return [r["config"] for r in rs[:top]]


def measure_best():
    """Per shape, the screen's three fastest configurations (as lesson 07 does: a screen's order among
    near-equals is noise) against torch._scaled_mm with fast accumulation (what Triton's fp8 dot does on sm_90
    by default) and with precise accumulation, timed in turn three times. The fastest candidate is recorded as
    ``gemm_fp8``, the others as ``gemm_fp8_candidate``. The accuracy of each against the fp32 product of the
    same e4m3 values is its ``rel_err``."""
    screen = search().records
    records = []
    for shape in SHAPES:
        a, bt, sa, sb, c = operands(shape)
        variants = [("scaled_mm", {"fast_accum": True}, lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, out=c))]
        variants += [("gemm_fp8_candidate", cfg, gemm_fp8.plan(a, bt, sa, sb, c, **cfg))
                     for cfg in candidates(screen, shape)]
        variants.append(("scaled_mm_precise", {"fast_accum": False},
                         lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, fast_accum=False, out=c)))
        ref = gemm_fp8.reference(a, bt, sa, sb)
        recs = measure.timed(variants, c, ref, 2e-2, shape=shape, flops=bench.gemm_flops(*shape))
        for r, (_, _, fn) in zip(recs, variants):
            fn()
            r["rel_err"] = round(float(((c.float() - ref.float()).norm() / ref.float().norm())), 5)
            r["dtype"] = "float8_e4m3fn"
        min((r for r in recs if r["name"] == "gemm_fp8_candidate"), key=lambda r: r["ms"])["name"] = "gemm_fp8"
        records += recs
    return records


RUNS = {"search": measure_search, "best": measure_best,
        "small_m": lambda: any_shape.measure_small_m((any_shape.FP8,)),
        "auto": lambda: any_shape.measure_auto(any_shape.NEW_SHAPES_FP8, (any_shape.FP8,))}


# ---- views: what the lesson reads and shows -----------------------------------------------------------------

@triton.jit
def matmul_fp8_nmajor_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr):
    # the course's kernel with B stored (K, N), N-major, as the fp16 GEMMs of lessons 03-07 take it
    scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for t in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (acc * scale).to(c_desc.dtype))


def best():
    return measure.run(LESSON, "best", measure_best, NEEDS)


def formats():
    """[(name, bits, largest finite, smallest normal, step above 1)] of the two FP8 formats, read from torch."""
    rows = []
    for name, dtype, bits in (("e4m3fn", torch.float8_e4m3fn, "S EEEE MMM, bias 7, no infinities"),
                              ("e5m2", torch.float8_e5m2, "S EEEEE MM, bias 15, with infinities")):
        f = torch.finfo(dtype)
        rows.append((name, bits, f.max, f.tiny, f.eps))
    return rows


def errors(M, N, K, device):
    """Relative errors of the course's FP8 kernel on fresh normal data: against the fp32 product of the same
    e4m3 values (the kernel's own error) and against the fp32 product of the unquantized data (what FP8
    costs), with the output poisoned first; and the error of quantizing A alone."""
    from ..lab import check
    a32, b32 = torch.randn(M, K, device=device), torch.randn(K, N, device=device)
    a, sa = gemm_fp8.quantize(a32)
    bt, sb = gemm_fp8.quantize(b32.t().contiguous())
    out = check.poisoned(M, N, dtype=torch.float16, padded=False)
    gemm_fp8.matmul_fp8(a, bt, sa, sb, out_dtype=torch.float16, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128,
                        stages=2, num_warps=4, programs=3, out=out)
    rel = lambda x, ref: ((x.float() - ref).norm() / ref.norm()).item()
    exact = a.float() @ bt.float().t() * (sa * sb)
    return {"quantizing A": rel(a.float() * sa, a32), "kernel vs fp32 product of the e4m3 values": rel(out, exact),
            "kernel vs fp32 product of the unquantized data": rel(out, a32 @ b32),
            "unwritten": bool(check.unwritten(out).any())}


def code_pair(stages=3):
    """(course kernel, the same with B N-major) compiled for sm_90 at 128x256x128: what wgmma's K-major rule costs."""
    kmajor = gemm_fp8.compile_sm90(stages=stages)
    nmajor = gemm_fp8.compile_sm90(kernel=matmul_fp8_nmajor_kernel, b_kmajor=False, stages=stages)
    kmajor.name, nmajor.name = "B^T (N, K), K-major", "B (K, N), N-major"
    return kmajor, nmajor


def shared_ops(compiled):
    """{opcode: count} of the PTX's shared-memory loads and stores and byte shuffles (prmt)."""
    from collections import Counter
    from ..lab import isa
    return dict(Counter(op for op, _ in isa.ptx_ops(compiled.ptx) if op.startswith(("ld.shared", "st.shared", "prmt"))))


def versus_scaled_mm(records):
    """[(shape, course record, scaled_mm fast record, scaled_mm precise record or None)] per shape, in SHAPES order."""
    rows = []
    for shape in SHAPES:
        at = [r for r in records if tuple(r["shape"]) == shape]
        get = lambda name: next((r for r in at if r["name"] == name), None)
        if get("gemm_fp8") and get("scaled_mm"):
            rows.append((shape, get("gemm_fp8"), get("scaled_mm"), get("scaled_mm_precise")))
    return rows


def bars(records):
    """The issue's FP8 bars from the best run: (ratio at BAR_SHAPE, geometric mean over the shapes, shapes, verdict)."""
    ratios = {shape: fast["ms"] / ours["ms"] for shape, ours, fast, _ in versus_scaled_mm(records)}
    if not ratios:
        return None
    geo = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    at_bar = ratios.get(BAR_SHAPE)
    held = at_bar is not None and at_bar >= 1.0 and geo >= 0.9 and len(ratios) == len(SHAPES)
    return at_bar, geo, len(ratios), held


def plot_versus(records, label):
    """TFLOP/s per shape: the course's kernel, _scaled_mm with fast accumulation, and with precise accumulation."""
    import matplotlib.pyplot as plt
    rows = versus_scaled_mm(records)
    fig, ax = plt.subplots(figsize=(7, 3))
    x = range(len(rows))
    for i, (what, pick) in enumerate((("course gemm_fp8", 1), ("torch._scaled_mm fast accum", 2),
                                      ("torch._scaled_mm precise accum", 3))):
        ax.bar([j + (i - 1) * 0.27 for j in x], [r[pick]["tflops"] if r[pick] else 0 for r in rows], 0.27,
               label=what)
    ax.set_xticks(list(x), ["x".join(map(str, r[0])) for r in rows], fontsize=7)
    ax.set(ylabel="TFLOP/s (e4m3)", title=f"FP8 GEMM, {label}")
    ax.title.set_fontsize(9)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2)  # room above the bars for the legend
    ax.legend(fontsize=7, ncol=3, loc="upper center")
    fig.tight_layout()
    plt.show()


def fp16_at_same_shapes(fp8_records):
    """[(shape, fp8 TFLOP/s, fp16 TFLOP/s, fp16 cuBLAS TFLOP/s)] where lesson 07's recorded best run has the shape
    in fp16, and the label of those records."""
    store = recorded_results.recorded()
    fp16 = [r for r in store.select("07", "best") if r["dtype"] == "float16"]
    rows = []
    for shape, ours, _, _ in versus_scaled_mm(fp8_records):
        at = {r["name"]: r for r in fp16 if tuple(r["shape"]) == shape}
        if "gemm_best" in at and "cublas_gemm" in at:
            rows.append((shape, ours["tflops"], at["gemm_best"]["tflops"], at["cublas_gemm"]["tflops"]))
    return rows, store.label


# ---- the widget ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Fp8Query(measure.Query):
    """A configuration of the course's FP8 kernel against torch._scaled_mm (fast accumulation) at one shape."""
    against: str = "scaled_mm"
    needs: str = NEEDS

    unit = "tflops"

    def setup(self):
        a, bt, sa, sb, c = operands(self.shape)
        return measure.Live(lambda: self.launch(a, bt, sa, sb, c), lambda: gemm_fp8.scaled_mm(a, bt, sa, sb, out=c),
                            bench.gemm_flops(*self.shape), out=c, ref=gemm_fp8.reference(a, bt, sa, sb), tol=2e-2)


class Fp8Gemm(Widget):
    """The e4m3 tile's shared-memory budget, its code, and the search's figure against _scaled_mm at one shape."""
    lesson = LESSON
    sliders = dict(BLOCK_N=[128, 256], stages=list(STAGES), persistent=[False, True],
                   shape=["x".join(map(str, s)) for s in SHAPES])
    defaults = dict(BLOCK_N=256, stages=3, persistent=True, shape="x".join(map(str, BAR_SHAPE)))
    title, base_label = "e4m3 GEMM", "_scaled_mm"

    def config(self, cfg):
        """The space's configuration for this setting: C stored in halves where the whole tile does not fit."""
        halves = {"subtile": True} if stored_in_halves(128, cfg["BLOCK_N"], 128, cfg["stages"], elem_bytes=1) else {}
        return dict(BLOCK_M=128, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=128, num_warps=8, stages=cfg["stages"],
                    persistent=cfg["persistent"], **halves)

    def compile(self, cfg):  # the code does not depend on the shape: compiled once per tile and stage count
        return gemm_fp8.compile_sm90(128, cfg["BLOCK_N"], 128, cfg["stages"], num_warps=8,
                                     subtile=self.config(cfg).get("subtile", False))

    def budget(self, cfg, compiled):
        c_bytes = 128 * cfg["BLOCK_N"] * (1 if self.config(cfg).get("subtile") else 2)
        return smem.Budget(cfg["stages"], smem.gemm_stage_bytes(128, cfg["BLOCK_N"], 128, 1), output_tile=c_bytes,
                           compiled=compiled.shared)

    def evidence(self, cfg, compiled):
        c = compiled.counts()
        halves = ", staged in two halves" if self.config(cfg).get("subtile") else ""
        return [f"one stage: A box 128x128 e4m3 = 16 KiB + B^T box {cfg['BLOCK_N']}x128 e4m3 = "
                f"{cfg['BLOCK_N'] * 128 // 1024} KiB, rows of 128 bytes; the bf16 C tile = {cfg['BLOCK_N'] // 4} KiB"
                f"{halves}",
                f"code: {c['wgmma.mma_async']} wgmma.mma_async (e4m3), {c['cp.async.bulk.tensor load']} TMA loads, "
                f"{c['QGMMA']} QGMMA in SASS ({compiled.origin})"]

    def recorded_as(self, cfg):
        """(run, name) of the recorded figure for this setting: the best run's, where that run timed the
        configuration again (the figure section 4's table prints), else the screen's one short timing. Each run
        times _scaled_mm in turn with the kernel, so ratios compare across runs; TFLOP/s from two runs do not
        (the screen and the best run differ by about 13% for both at 8192 x 8192 x 4096)."""
        tile, shape = self.config(cfg), [int(v) for v in cfg["shape"].split("x")]
        for name in ("gemm_fp8", "gemm_fp8_candidate"):
            if recorded_results.recorded().find(LESSON, "best", name, shape, tile):
                return "best", name
        return "search", "gemm_fp8"

    def query(self, cfg):
        tile = self.config(cfg)
        shape = tuple(int(v) for v in cfg["shape"].split("x"))
        return Fp8Query(LESSON, *self.recorded_as(cfg), tile, shape,
                        lambda a, bt, sa, sb, c: gemm_fp8.matmul_fp8(a, bt, sa, sb, out=c, **tile))

    def label(self, cfg):
        halves = ", C in halves" if self.config(cfg).get("subtile") else ""
        source = "" if measure.can_run(NEEDS) else (
            "; the best run's figure" if self.recorded_as(cfg)[0] == "best" else "; the screen's figure (one short timing)")
        return (f"128x{cfg['BLOCK_N']}x128, {cfg['stages']} stages{', persistent' if cfg['persistent'] else ''}"
                f"{halves}, {cfg['shape']}{source}")


fp8_gemm = Fp8Gemm()
