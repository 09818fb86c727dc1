"""The interview pack's own items: the topics the lessons touch only in passing (occupancy and register
pressure, bank conflicts, waves and split-K / stream-K, FP8, profiling), whiteboard problems and "explain
this PTX/SASS" prompts. Every figure in a worked answer is computed here by the course's own code when
the answer is first needed (the generator's answer key, or Reveal in the self-test): the compiled kernels
(``aot``), ``smem``, ``tma_rules``, lesson 04's timeline, lesson 05's bank groups, the recorded results; every
other claim names its source."""
import functools
import math
import re

import torch
import triton

from ..lab import aot, isa, results, smem, swizzle, tma_rules
from ..lab.errors import TMAError
from ..lab.mode import DEVICE
from ..lessons import findings
from ..lessons import l01_naive_loads as l01
from ..lessons import l04_pipelining as l04
from ..lessons import l05_tilelang as l05
from ..ops import copy, gemm, latency
from .card import MAX_WARPS, REG_UNIT, REGS_PER_SM
from .items import SMS, Item, gemm_tiles, waves

KiB = 1024


# ---- compiled kernels, once per session ---------------------------------------------------------

@functools.lru_cache(maxsize=None)
def compiled(name):
    """The sm_90 code of one of the course's kernels, as a launch compiles it."""
    if name == "chase":
        chain, out = torch.empty(1 << 20, dtype=torch.int32, device=DEVICE), torch.empty(1, dtype=torch.int32,
                                                                                         device=DEVICE)
        return aot.compile_sm90(latency.chase_kernel, chain, out, 0, 4096, CACHE=".cg", num_warps=1)
    if name == "tma_copy":
        x = torch.empty(4, dtype=torch.float16, device=DEVICE)
        return aot.compile_sm90(copy.copy_tma_kernel, x, x, 16384, 16384, 16384, 16384,
                                BLOCK_M=64, BLOCK_N=128, num_warps=4)
    if name == "gemm_pointer":
        return gemm.compile_sm90(gemm.matmul_kernel, 128, 256, 64, 3)
    if name == "gemm_tma":
        return gemm.compile_sm90(gemm.matmul_tma_kernel, 128, 256, 64, 3)
    if name == "gemm_tma_fp8":  # B stored K-major (column-major), as fp8 wgmma wants it
        M = N = K = 4096
        a = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=DEVICE)
        b = torch.empty(N, K, dtype=torch.float8_e4m3fn, device=DEVICE).T
        c = torch.empty(M, N, dtype=torch.float16, device=DEVICE)
        _, args, meta = gemm.launch_args(a, b, c, 128, 256, 128, 3)
        return aot.compile_sm90(gemm.matmul_tma_kernel, *args, **meta)
    if name == "spill":  # lesson 01's 128 x 256 fp16 tile copy on one warp, as the lesson compiles it
        return l01.compile_tile(128, 256, num_warps=1)
    raise KeyError(name)


def _clean(lines, width=110):
    out = []
    for line in lines:
        text = " ".join(line.split("//")[0].split())
        out.append(text if len(text) <= width else text[:width - 5] + " ...")
    return out


def ptx_excerpt(ptx, first, last, keep=None, limit=15):
    """PTX lines from the first matching ``first`` to the next matching ``last``, without debug lines
    and comments; with ``keep``, only labels and instructions that start with one of ``keep``."""
    lines = [ln for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", ".loc"))]
    start = next(i for i, ln in enumerate(lines) if re.search(first, ln))
    end = next(i for i in range(start + 1, len(lines)) if re.search(last, lines[i]))
    picked = [ln for ln in lines[start:end + 1]
              if keep is None or ln.strip().endswith(":") or re.sub(r"^@!?%?\w+\s+", "", ln.strip()).startswith(keep)]
    return _clean(picked)[:limit]


def loop_outline(ptx):
    """``isa.outline`` of the kernel's main loop: from its label to the branch back."""
    lines = isa.outline(ptx).splitlines()
    start = next(i for i, ln in enumerate(lines) if "<- loop" in ln)
    label = lines[start].split(":")[0]
    end = next(i for i in range(start + 1, len(lines)) if "bra" in lines[i] and label in lines[i])
    return lines[start:end + 1]


def sass_lines(sass, pattern, limit=12, start=None):
    """The SASS instructions matching ``pattern``, from the first that matches ``start``."""
    ops = [ln.split("\t")[-1].strip() if "\t" in ln else ln.strip() for ln in sass.splitlines()]
    if start:
        ops = ops[next(i for i, op in enumerate(ops) if re.search(start, op)):]
    return _clean([op for op in ops if re.search(pattern, op)])[:limit]


def _code(lines, lang=""):
    return f"```{lang}\n" + "\n".join(lines) + "\n```"


# ---- questions on the added topics (answers written here, each claim cited or computed) ----------

def _occupancy_of(comp):
    res = isa.resources(comp.cubin)
    threads = comp.num_warps * 32
    regs_warp = math.ceil(res["REG"] * 32 / REG_UNIT) * REG_UNIT
    by_regs = REGS_PER_SM // (regs_warp * comp.num_warps)
    by_smem = smem.HOPPER_LIMIT // max(comp.shared, 1)
    blocks = min(by_regs, by_smem, MAX_WARPS // comp.num_warps)
    return res, threads, regs_warp, by_regs, by_smem, blocks


def _occupancy_answer():
    comp = compiled("gemm_pointer")
    res, threads, regs_warp, by_regs, by_smem, blocks = _occupancy_of(comp)
    return (f"`cuobjdump -res-usage` on its cubin: **{res['REG']} registers per thread**, {comp.num_warps} warps "
            f"= {threads} threads, and the kernel asks {comp.shared / KiB:.1f} KiB of shared memory.\n\n"
            f"- registers: allocated per warp in units of {REG_UNIT}, so {regs_warp} per warp, "
            f"{regs_warp * comp.num_warps:,} per block; {REGS_PER_SM:,} per SM allow **{by_regs}** block(s);\n"
            f"- shared memory: {smem.HOPPER_LIMIT / KiB:.0f} KiB per block at most allow **{by_smem}** block(s);\n"
            f"- so **{blocks} block per SM**: {blocks * comp.num_warps} of {MAX_WARPS} warps, an occupancy of "
            f"{blocks * comp.num_warps / MAX_WARPS:.1%}.\n\n"
            "That is the course's fastest pointer GEMM (lesson 02): low occupancy, and the loads are still "
            "hidden, by the stages in flight (each warp has several tiles on the road) and by `wgmma` running "
            "asynchronously, not by more warps. Limits: CUDA C++ Programming Guide, \"Compute Capabilities\" "
            "table (65,536 registers per SM, at most 255 per thread, 64 resident warps per SM for 9.0); the "
            "allocation unit is the one the CUDA Occupancy Calculator uses.")


def _spill_answer():
    comp = compiled("spill")
    res, c = isa.resources(comp.cubin), comp.counts()
    # the STL count lesson 01 prints (predicated ones included), and the LDL count alike
    stl, ldl = l01.spill_stores(comp), isa.opcodes(comp.sass)["LDL"]
    return (f"`STL` stores registers to **local memory** and `LDL` loads them back: a **spill**. The tile is "
            f"128 x 256 fp16 = 64 KiB, copied by one warp: 1,024 elements per thread, far more than the 255 "
            f"registers a thread may have, so the compiler parks values in local memory (per thread, but "
            f"physically in HBM behind L1 and L2) and reads them back. This kernel: {res['REG']} registers, "
            f"a {res['STACK']:,}-byte stack frame per thread in local memory (`cuobjdump -res-usage`: STACK), "
            f"{stl} `STL` and {ldl} `LDL` in its SASS beside {c['LDG']} `LDG`. Lesson 01's sweep measures this tile on one warp as the slowest of all. "
            "`ptxas -v` reports the same as \"bytes spill stores\"; the cure is more warps per tile (or a "
            "smaller tile), which spreads the tile over more registers.")


def _fp8_answer():
    lines = {n: next(ln for ln in compiled(n).ptx.splitlines() if "wgmma.mma_async" in ln).split()[0]
             for n in ("gemm_tma", "gemm_tma_fp8")}
    k16, k8 = (int(re.search(r"k(\d+)", lines[n]).group(1)) for n in ("gemm_tma", "gemm_tma_fp8"))
    return (f"The course's TMA GEMM compiled for sm_90 with fp16 operands issues `{lines['gemm_tma']}`; the "
            f"same kernel with e4m3 operands issues `{lines['gemm_tma_fp8']}`. Read the suffix: a warpgroup "
            f"computes a 64 x 256 block, K = {k16} per instruction for fp16 and **K = {k8} for fp8**, the "
            "accumulator in fp32, A and B both e4m3. Same bytes of A and B per instruction, twice the "
            "multiply-adds. The doubled rate is the tensor cores' own: they do twice as many FP8 multiply-adds "
            "a cycle as FP16 ones (the datasheet's dense FP8 peak is twice FP16's: NVIDIA H100 Tensor Core GPU "
            "datasheet), and the k32 shape is how one instruction carries that, not where it comes from.\n\n"
            "What `wgmma` takes (PTX ISA, `wgmma.mma_async`): `.e4m3` and "
            "`.e5m2` in any mix for A and B, accumulating in `.f32` or `.f16`; its transpose flags exist only "
            "for 16-bit types, so fp8 tiles must sit K-major in shared memory (this kernel's B was stored "
            "K-major for that reason). What it does not do: scaling. e4m3 reaches at most 448 and e5m2 57,344 "
            "(OCP 8-bit Floating Point specification), so real FP8 GEMMs carry scale factors. Scales constant "
            "along K (per tensor, or per row of A and column of B, as `torch._scaled_mm` takes them) factor out "
            "of the sum and multiply the fp32 accumulator once, in the epilogue. Scales blocked along K do not: "
            "DeepSeek-V3 scales activations per 1 x 128 tile and weights per 128 x 128 block, and its GEMM "
            "promotes the tensor core's partial sum to an fp32 accumulator every 128 K elements, multiplying "
            "it there by that K block's two scales (DeepSeek-V3 Technical Report, arXiv:2412.19437, section "
            "3.3): the scaling happens inside the K loop.")


def _profiling_answer():
    store = results.recorded()
    rows = l04.launch_rows(store.select("04", "launch"))
    lines = ["| kernel | `do_bench` us | CUDA graph us | host us per launch | bound by |", "|---|---|---|---|---|"]
    for name, _cfg, t in rows:
        if not {"do_bench", "cuda_graph", "host"} <= set(t):
            continue
        gpu, host = t["cuda_graph"]["ms"] * 1e3, t["host"]["ms"] * 1e3
        lines.append(f"| {name} | {t['do_bench']['ms'] * 1e3:.1f} | {gpu:.1f} | {host:.1f} | "
                     f"{'the host' if host > gpu else 'the GPU'} |")
    table = "\n".join(lines)
    return (f"Lesson 04's launch run at 2048^3 ({store.label}):\n\n{table}\n\n"
            "Where the host's time per launch exceeds the GPU's time per kernel, a loop of launches runs at the "
            "host's pace: those kernels are **launch-bound**, and a faster kernel would change nothing. "
            "`do_bench`'s figure sits near the GPU time for all of them because the host prepares each launch "
            "while the GPU clears L2 (lesson 04, section 6). Cures: CUDA graphs, less host work per launch (a "
            "plan that does the checks, the dispatch and the tensor maps once), or more work per launch. Where "
            "the maps are built, measured once:\n\n" + findings.text("host-maps") + "\n\nIn Nsight Systems the "
            "same shows as gaps between kernels on the GPU row while the CPU row is busy.")


ADDED = [
    # occupancy and register pressure
    ("occupancy", 1, "What is occupancy, and what limits it on Hopper?",
     "The warps resident on an SM as a fraction of the most it can hold (64 on compute capability 9.0). A block "
     "is resident only if all of its needs fit at once, so the scarcest resource sets it: registers (65,536 "
     "32-bit registers per SM, at most 255 per thread), shared memory (up to 227 KB per block, 228 KB per SM), "
     "at most 32 blocks and 2,048 threads per SM (CUDA C++ Programming Guide, \"Compute Capabilities\"). "
     "The whiteboard problem on the course's GEMM works it out for a real kernel."),
    ("occupancy", 2, "Is higher occupancy always faster?",
     "No. Occupancy is one way to have enough work in flight to cover latency (lesson 00's Little's law); "
     "independent instructions per warp and asynchronous copies are others. The course's fastest GEMMs run "
     "one block of 4 or 8 warps per SM (6.25% or 12.5%), keeping the loads of the next stages on the road with `cp.async` or TMA "
     "while `wgmma` works. Raising occupancy by cutting registers or tile size can lose more (smaller tiles, "
     "lower arithmetic intensity, spills) than it gains. V. Volkov, \"Better Performance at Lower Occupancy\" "
     "(GTC 2010) makes the case with measurements."),
    ("occupancy", 2, "What is register spilling, and where do you see it?",
     "When a thread needs more live values than its registers, the compiler stores some to local memory "
     "(private to the thread, physically in HBM behind the caches) and loads them back: `STL` / `LDL` in the "
     "SASS, a non-zero `LOCAL` in `cuobjdump -res-usage`, \"bytes spill stores\" from `ptxas -v`. The "
     "\"explain this SASS\" prompt on lesson 01's one-warp tile shows it."),
    # bank conflicts
    ("banks", 1, "How is shared memory banked, and what is a bank conflict?",
     "32 banks, each 4 bytes wide; successive 4-byte words sit in successive banks, so the bank of a byte "
     "address is (address / 4) mod 32. A warp's request is served in one pass if its threads touch different "
     "banks (or the same word, which is broadcast); n different addresses in one bank take n passes, an "
     "n-way **bank conflict** (CUDA C++ Programming Guide, \"Shared Memory\" under compute capability 5.x "
     "and later, which Hopper follows)."),
    ("banks", 2, "Padding or swizzling: how do you remove a bank conflict, and which one does TMA use?",
     "Padding adds a few unused elements per row (a 32 x 32 fp32 tile stored 32 x 33), so column j of "
     "successive rows moves to successive banks: simple, but it wastes shared memory and gives rows a "
     "stride that is not a multiple of 16 bytes, which TMA and `wgmma` cannot describe. Swizzling keeps the "
     "rows dense and permutes 16-byte chunks within each row by XOR with the row index. TMA writes tiles in "
     "one of its swizzle patterns (32, 64 or 128 bytes; CUDA Driver API, `CUtensorMapSwizzle`) and the `wgmma` "
     "descriptor reads the same pattern (lesson 05, section 3)."),
    # waves, split-K, stream-K
    ("waves", 2, "What is wave quantization, and what do split-K and stream-K do about it?",
     "A grid of T equal tiles on P SMs runs in ceil(T / P) waves; the last one is partly empty, and the "
     "whole GEMM takes as long as the full waves. **Split-K** cuts the K loop of each tile into pieces done "
     "by different blocks, whose fp32 partial sums are added afterwards (a reduction kernel, or atomics): "
     "more, shorter work items, at the cost of writing and re-reading partial tiles. **Stream-K** gives each "
     "of P persistent blocks an equal share of all the K-steps of all tiles, crossing tile boundaries, and "
     "fixes up the tiles shared by two blocks (M. Osama, D. Merrill, C. Cecka, M. Garland, J. D. Owens, "
     "\"Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU\", "
     "PPoPP 2023; CUTLASS ships both). A persistent kernel alone (lesson 04) does not fix it: its programs "
     "still take whole tiles in turn, so some take one more tile than others."),
    ("waves", 3, "A GEMM with M = N = 512 and K = 65,536 runs far below peak. What would you try first?",
     "Count the tiles: with 128 x 256 tiles that is 4 x 2 = 8 tiles for 132 SMs, so 124 SMs idle however "
     "fast each tile is. Split K: with 16 splits there are 128 work items of 4,096-deep K loops, the partial "
     "results (8 x 16 fp32 tiles) reduced afterwards; or a smaller tile; or stream-K. The whiteboard "
     "problem on waves computes the same kind of count."),
    # FP8
    ("fp8", 1, "What FP8 formats does Hopper's tensor core support?",
     "Two: **e4m3** (4 exponent bits, 3 mantissa bits: more precision, largest value 448) and **e5m2** "
     "(5 and 2: more range, largest 57,344), as defined by the OCP 8-bit Floating Point specification and "
     "taken by `wgmma.mma_async` as `.e4m3` / `.e5m2` (PTX ISA). e4m3 is the usual choice for weights and "
     "activations in the forward pass, e5m2 for gradients (P. Micikevicius et al., \"FP8 Formats for Deep "
     "Learning\", 2022)."),
    # profiling
    ("profiling", 2, "What does `triton.testing.do_bench` report, and what does it hide?",
     "One statistic of many repetitions after a warm-up, each timed with CUDA events: by default the mean "
     "(`return_mode=\"mean\"` in Triton 3.6; \"median\", \"min\", \"max\", \"all\" or `quantiles` on "
     "request); the course passes `return_mode=\"median\"` (`kernels/lab/bench.py`). Before every "
     "repetition it writes a 256 MB buffer to clear L2, so each run starts with a cold cache (lesson 00, "
     "section 3), and the host prepares the next launch while the GPU clears, which hides host time up to "
     "that long (lesson 04, section 6). The course adds `do_bench_cudagraph` (launches replayed from a CUDA "
     "graph: GPU time alone, L2 not cleared), its own host time per launch, and the SM clock and power "
     "sampled during a run (`kernels/lab/bench.py`, `kernels/lab/clocks.py`): a GEMM loop reaches the power "
     "cap and the clock drops, so a variant and its baseline are interleaved."),
    ("profiling", 2, "What would you use Nsight Systems for, and what Nsight Compute?",
     "**Nsight Systems** (`nsys profile`): a timeline of the whole program, CPU threads, CUDA API calls, "
     "kernels and copies; it shows gaps between kernels, launch-bound loops, synchronisations and overlap "
     "(NVIDIA, Nsight Systems User Guide). **Nsight Compute** (`ncu`): one kernel at a time, replayed to "
     "collect hardware counters: throughput against the memory and compute peaks, achieved occupancy, bytes "
     "per cache level, warp stall reasons, per-line SASS (NVIDIA, Nsight Compute Kernel Profiling Guide). "
     "By default `ncu` locks the clocks to base (`--clock-control base`), so its durations are not the "
     "boost-clock times `do_bench` sees. Start with nsys to find where the time goes, then ncu on the kernel "
     "that matters."),
]


# ---- whiteboard problems ------------------------------------------------------------------------

SMEM_CASES = [  # (BM, BN, BK, output tile staged for a TMA store)
    (128, 256, 64, False),
    (128, 256, 64, True),
    (128, 128, 64, True),
]


def _smem_prompt():
    cases = "\n".join(f"- {bm} x {bn} x {bk}" + (", output tile staged in shared memory for a TMA store"
                                                   if out else "") for bm, bn, bk, out in SMEM_CASES)
    return ("A pipelined fp16 GEMM keeps one A tile (BM x BK) and one B tile (BK x BN) per stage in shared "
            "memory. On Hopper a block may have 227 KiB. How many stages fit for each configuration?\n\n" + cases)


def _smem_answer():
    out = []
    for bm, bn, bk, staged in SMEM_CASES:
        stage = smem.gemm_stage_bytes(bm, bn, bk)
        tile = bm * bn * 2 if staged else 0
        fit = (smem.HOPPER_LIMIT - tile) // stage
        b = smem.Budget(fit, stage, tile)
        out.append(f"- {bm} x {bn} x {bk}{' + output tile' if staged else ''}: one stage = ({bm} x {bk} + {bk} x "
                   f"{bn}) x 2 B = {stage / KiB:.0f} KiB" + (f", output tile {tile / KiB:.0f} KiB" if tile else "")
                   + f"; **{fit} stages** ({b.parts()} = {b.model / KiB:.0f} KiB of {b.limit / KiB:.0f})")
    comp = compiled("gemm_pointer")
    return ("\n".join(out) + f"\n\nCheck against a compiled kernel: the course's pointer GEMM at 128 x 256 x 64, "
            f"3 stages asks **{comp.shared / KiB:.1f} KiB** (compiled for sm_90 by Triton {triton.__version__}): 3 x 48 "
            "KiB, as the model says. "
            "The compiled figure also holds the mbarriers and any buffer the compiler adds, which is why the "
            "course trusts it over the model (`kernels/lab/smem.py`).")


PIPE = dict(N=64, C=1.0, M=1.5)


def _pipe_answer():
    N, C, M = PIPE["N"], PIPE["C"], PIPE["M"]
    t = {s: l04.timeline(C, M, s, steps=N)[1][-1][1] for s in (1, 2, 3)}
    return (f"- one stage, serial: N(C + M) = {N} x {C + M:g} = **{N * (C + M):g} us**; lesson 04's timeline "
            f"(`l04_pipelining.timeline`) ends at {t[1]:g} us.\n"
            f"- double buffered: N max(C, M) + min(C, M) = {N} x {max(C, M):g} + {min(C, M):g} = "
            f"**{N * max(C, M) + min(C, M):g} us** (the loads set the pace; one compute drains); the timeline "
            f"ends at {t[2]:g} us.\n"
            f"- speed-up {t[1] / t[2]:.2f}x, below the (C + M)/max(C, M) = {(C + M) / max(C, M):.2f} limit "
            f"only by the fill and drain. A third stage ends at {t[3]:g} us: with M > C the copy engine is "
            "already busy all the time, so more stages cannot help; they would only if a load's latency, not "
            "its transfer, exceeded a step (lesson 04, section 1's $M_S$).")


def _tma_tensors():
    """(description, tensor, box): each breaks at most one rule of ``tma_rules``."""
    base = torch.empty(1024, 1032, dtype=torch.float16)
    return [
        ("a contiguous fp16 tensor of 1000 x 1000, box 64 x 64", torch.empty(1000, 1000, dtype=torch.float16), [64, 64]),
        ("a contiguous fp16 tensor of 1000 x 1001, box 64 x 64", torch.empty(1000, 1001, dtype=torch.float16), [64, 64]),
        ("`x[:, 1:1025]` of a contiguous 1024 x 1032 fp16 `x`, box 64 x 64", base[:, 1:1025], [64, 64]),
        ("`x.T` of a contiguous 1024 x 1024 fp16 `x`, box 64 x 64", torch.empty(1024, 1024, dtype=torch.float16).T,
         [64, 64]),
        ("a contiguous fp16 tensor of 1024 x 1024, box 64 x 4", torch.empty(1024, 1024, dtype=torch.float16), [64, 4]),
        ("a contiguous fp32 tensor of 4096 x 4096, box 512 x 32", torch.empty(4096, 4096), [512, 32]),
    ]


def _tma_prompt():
    cases = "\n".join(f"{i}. {d}" for i, (d, _, _) in enumerate(_tma_tensors(), 1))
    return ("Which of these can be read through a TMA tensor map with the box given, and which rule does each "
            "other one break?\n\n" + cases)


def _tma_answer():
    out = []
    for i, (d, t, box) in enumerate(_tma_tensors(), 1):
        try:
            tma_rules.check_operand(t, box, "x")
            out.append(f"{i}. fits: every row is {t.stride(0) * t.element_size():,} bytes, a multiple of 16.")
        except TMAError as e:
            out.append(f"{i}. breaks a rule; the course's check says: *{e}*")
    return ("\n".join(out) + "\n\nRules: CUDA Driver API, `cuTensorMapEncodeTiled` (16-byte aligned base, strides "
            "multiples of 16 bytes, box dims 1 to 256, inner box row a multiple of 16 bytes), and Triton 3.6 "
            "(contiguous last dimension, power-of-two boxes); checked by `kernels/lab/tma_rules.py`, lesson 03 "
            "section 6.")


WAVE_CASES = [((3072, 3072, 3072), 128, 256), ((3072, 3072, 3072), 128, 128), ((2048, 2048, 2048), 128, 256),
              ((8192, 8192, 8192), 128, 256)]


def _waves_prompt():
    cases = "\n".join(f"- {s[0]}^3 with {bm} x {bn} tiles" for s, bm, bn in WAVE_CASES)
    return (f"One block computes one output tile, and one block fits per SM. On a GPU with {SMS} SMs (H100 SXM, "
            "H200), how many waves does each GEMM take, how full is the last one, and what fraction of the "
            "SMs' time does the grid keep busy?\n\n" + cases)


def _waves_answer():
    out = []
    for shape, bm, bn in WAVE_CASES:
        tiles = gemm_tiles(shape, bm, bn)
        n, last, busy = waves(tiles)
        out.append(f"- {shape[0]}^3, {bm} x {bn}: {shape[0] // bm} x {shape[1] // bn} = {tiles} tiles -> "
                   f"**{n} wave{'s' if n > 1 else ''}**, the last with {last} of {SMS} SMs busy; {busy:.0%} of "
                   "the SM-time does work")
    return ("\n".join(out) + "\n\nAt 3072^3 with 128 x 256 tiles the third wave runs 24 tiles on 132 SMs: "
            "the GEMM takes as long as three full waves for 2.2 waves of work. Smaller tiles quantize less "
            "but have lower intensity; split-K and stream-K spread the work instead (the waves question above). "
            f"Tiles: `ceil(M/BM) x ceil(N/BN)`, waves `ceil(tiles / {SMS})`.")


def _occupancy_prompt():
    return ("The course's pointer GEMM with 128 x 256 x 64 tiles, 3 stages and 8 warps (lesson 02): find its "
            "registers per thread and shared memory from the compiled kernel, then work out how many blocks "
            "one SM can hold and its occupancy. (Per SM on Hopper: 65,536 registers, allocated per warp in "
            "units of 256; 64 warps; 227 KiB of shared memory per block.)")


def _bank_prompt():
    return ("Shared memory has 32 banks of 4 bytes. (a) The 32 threads of a warp each read one fp32 element of "
            "column 0 of a 32 x 32 fp32 tile stored row by row: how many ways does the read conflict? And if "
            "the tile is stored 32 x 33? (b) Eight threads each read the first 16-byte chunk of one of eight "
            "rows of a 64-wide fp16 tile (128-byte rows), stored plainly or with TMA's 128-byte swizzle: "
            "which bank groups (4 banks each) do they hit?")


def _bank_answer():
    plain = swizzle.passes([r * 32 * 4 for r in range(32)])  # a warp's 4-byte reads: the most words one bank holds
    padded = swizzle.passes([r * 33 * 4 for r in range(32)])
    groups = {s: [row[0] for row in l05.bank_groups(rows=8, swizzle=s)] for s in (False, True)}
    ways = {s: max(groups[s].count(g) for g in set(groups[s])) for s in groups}
    return (f"(a) Row r starts at byte 128 r, a whole number of bank rounds, so column 0 of every row is in "
            f"bank 0: a **{plain}-way** conflict, 32 passes. With rows of 33 words, row r's element is in bank "
            f"r mod 32: **{'conflict-free' if padded == 1 else f'{padded}-way'}**.\n\n"
            f"(b) Plain: chunk 0 of rows 0-7 is in groups {groups[False]}, all the same four banks: "
            f"**{ways[False]}-way**. Swizzled (chunk c of row r at c XOR (r mod 8), `l05_tilelang.bank_groups`): "
            f"groups {groups[True]}, all eight different, **{'conflict-free' if ways[True] == 1 else ways[True]}**. "
            "This is why the TMA engine writes a 64-wide fp16 tile swizzled and `wgmma` reads it so "
            "(lesson 05, section 3); the passes follow the CUDA C++ Programming Guide's shared-memory rules.")


# ---- a profiler's view: Nsight Compute on a memory-bound and a compute-bound course kernel -------------

NCU_ROWS = [  # (what, short name in a record's "ncu" (kernels.lab.ncu.METRICS), format of the value)
    ("SM clock during the launch", "sm_hz", lambda v: f"{v / 1e9:.2f} GHz"),
    ("DRAM throughput, % of peak", "dram_pct", lambda v: f"{v:.1f}%"),
    ("L2 throughput, % of peak", "l2_pct", lambda v: f"{v:.1f}%"),
    ("SM throughput, % of peak", "sm_pct", lambda v: f"{v:.1f}%"),
    ("tensor pipe active, % of cycles", "tensor_pct", lambda v: f"{v:.1f}%"),
    ("an instruction issued, % of cycles", "issue_pct", lambda v: f"{v:.1f}%"),
    ("warps active, % of 64 per SM", "warps_active_pct", lambda v: f"{v:.1f}%"),
    ("registers per thread", "registers", lambda v: f"{v:.0f}"),
    ("shared memory per block", "smem_per_block", lambda v: f"{v / KiB:.0f} KiB"),
    ("stalled on long scoreboard, per issue", "stall_long_scoreboard", lambda v: f"{v:.2f}"),
    ("stalled on a barrier, per issue", "stall_barrier", lambda v: f"{v:.2f}"),
    ("stalled on MIO throttle, per issue", "stall_mio_throttle", lambda v: f"{v:.2f}"),
    ("stalled on a fixed wait, per issue", "stall_wait", lambda v: f"{v:.2f}"),
    ("stalled on wgmma, per issue", "stall_gmma", lambda v: f"{v:.2f}"),
]


def _ncu_records():
    """(store, lesson 04's GEMM, lesson 03's copy, cuBLAS), each one launch profiled by ``kernels.tools.profile``."""
    store = results.recorded()
    found = (store.find("04", "ncu", "matmul_tma_persistent"), store.find("03", "ncu", "copy_tma"),
             store.find("04", "ncu", "cublas"))
    if None in found:
        raise LookupError("no ncu records: run `python -m kernels.tools.profile` on the H200")
    return (store, *found)


def _ncu_prompt():
    store, gemm_r, copy_r, _ = _ncu_records()
    rows = "\n".join(f"| {what} | {fmt(gemm_r['ncu'][k])} | {fmt(copy_r['ncu'][k])} |" for what, k, fmt in NCU_ROWS)
    return ("Nsight Compute's figures for one launch of each of two course kernels (`ncu --clock-control none`, "
            f"recorded on {store.device}, {gemm_r.get('date', '?')}). A stall figure is the warps waiting for that "
            "reason, on average, per cycle in which a warp issued.\n\n| | kernel A | kernel B |\n|---|---|---|\n"
            f"| duration | {gemm_r['ms'] * 1e3:.0f} us | {copy_r['ms'] * 1e3:.0f} us |\n{rows}\n\n"
            "Which kernel is bound by memory and which by compute? Which figures say so, and which would "
            "mislead you? What would you try next on each?")


def _ncu_answer():
    store, g, c, cub = _ncu_records()
    gn, cn, bn = g["ncu"], c["ncu"], cub["ncu"]
    copies = {r["name"] + (f" ({r['config']['stages']} stages)" if "stages" in r["config"] else ""): r
              for r in store.select("03", "copies") if r["name"] in ("torch_copy", "copy_tma", "copy_tma_loop")
              and r["config"].get("stages") in (None, 4) and r["config"].get("descriptor") in (None, "device")}
    lanes = ", ".join(f"{n} {r['gbps'] / 1000:.2f} TB/s" for n, r in copies.items())
    tiles = gemm_tiles(g["shape"], g["config"]["BLOCK_M"], g["config"]["BLOCK_N"])
    n_waves, _, busy = waves(tiles)
    bench = store.find("04", "sweep", "gemm_tma", config={"BLOCK_M": 128, "BLOCK_N": 256, "stages": 3,
                                                           "persistent": True})
    bench_line = (f" Lesson 04's `do_bench` median of the same kernel, in its own run, is {bench['ms']:.2f} ms "
                  f"({bench['tflops']:.0f} TFLOP/s): a median over a loop of launches with L2 flushed before each, "
                  "not one launch under ncu. What makes the gap is not measured here; compare a kernel with its "
                  "baseline in one method, never across two." if bench else "")
    return (f"**Kernel B is bound by memory.** It is lesson 03's TMA copy, one {c['config']['BLOCK_M']} x "
            f"{c['config']['BLOCK_N']} tile per program, {c['shape'][0]} x {c['shape'][1]} fp16: DRAM at "
            f"{cn['dram_pct']:.0f}% of its peak ({cn['dram_bytes_per_s'] / 1e12:.2f} TB/s) while the SMs use "
            f"{cn['sm_pct']:.0f}% of theirs and the tensor pipe nothing. Its warps are present "
            f"({cn['warps_active_pct']:.0f}% of the SM's 64 slots) but issue in {cn['issue_pct']:.0f}% of cycles: they "
            "wait, most on a long scoreboard "
            f"({cn['stall_long_scoreboard']:.0f} per issue; ncu's name for waiting on a memory operation's result) and "
            f"on a barrier ({cn['stall_barrier']:.0f}) (NVIDIA, Nsight Compute Kernel Profiling Guide, warp stall "
            "reasons). Its ceiling is a copy's, not the datasheet's: lesson 03's "
            f"recorded copies ({store.label}): {lanes}. What to try: more bytes in flight per SM, so that each "
            "program keeps several tiles on the road (lesson 03's TMA loop with 4 stages), not more arithmetic.\n\n"
            f"**Kernel A is bound by compute.** It is lesson 04's persistent TMA GEMM, {g['config']['BLOCK_M']} x "
            f"{g['config']['BLOCK_N']} x {g['config']['BLOCK_K']}, {g['config']['stages']} stages, at "
            f"{g['shape'][0]}^3 fp16: the tensor pipe is active {gn['tensor_pct']:.1f}% of the cycles "
            f"({g['tflops']:.0f} TFLOP/s over its {g['ms']:.3f} ms) while DRAM runs at {gn['dram_pct']:.0f}% of its "
            f"peak. cuBLAS at the same shape, profiled the same way: tensor pipe {bn['tensor_pct']:.1f}%, "
            f"{cub['ms']:.3f} ms. The card chose a lower SM clock during the GEMMs than during the copy "
            f"({gn['sm_hz'] / 1e9:.2f} and {bn['sm_hz'] / 1e9:.2f} GHz against {cn['sm_hz'] / 1e9:.2f} GHz): a "
            "percentage of peak is of the cycles that ran, a duration depends on the clock too. What would "
            f"mislead: {gn['warps_active_pct']:.1f}% warps active and an issue rate "
            f"of {gn['issue_pct']:.0f}% look poor, but one block of 8 warps per SM is the design "
            f"({gn['registers']:.0f} registers per thread, {gn['smem_per_block'] / KiB:.0f} KiB of shared memory "
            "per block, most of it the stages), and the tensor pipe is busy while few instructions issue: one "
            "`wgmma` keeps it working for many cycles. For a GEMM the figure to read is the tensor pipe's; the rest "
            "is the schedule: "
            f"{tiles} tiles on {SMS} SMs are "
            f"{n_waves} waves, {busy:.0%} of SM-time busy, plus the prologue and epilogue of each tile (a "
            "hypothesis for the remaining idle cycles, not measured here). Next: little; a faster GEMM at this "
            f"shape has at most {100 - gn['tensor_pct']:.0f}% of cycles to win.{bench_line}\n\n"
            "How to get these figures: `python -m kernels.tools.profile` (one launch per kernel, "
            "`--clock-control none` so ncu leaves the clock as the course's timings find it; by default it locks "
            "it to base).")


def _read_records():
    """Lesson 06's four column reads, each one launch profiled by ``kernels.tools.profile`` (name -> record)."""
    found = {r["name"]: r for r in results.recorded().select("06", "ncu") if r["name"].startswith("read")}
    if len(found) != 4:
        raise LookupError("no ncu records of lesson 06's reads: run `python -m kernels.tools.profile` on the H200")
    return found


def _reads_prompt():
    recs = _read_records()
    rows = "\n".join(f"| {k} | {r['ms'] * 1e3:.0f} us | {r['ncu']['sld_insts']:,.0f} | {r['ncu']['sld_wavefronts']:,.0f} "
                     f"| {r['ncu']['sld_conflicts']:,.0f} |" for k, r in zip("ABCD", recs.values()))
    return ("Four kernels load a 32 x 64 fp16 tile (rows of 128 bytes) into shared memory and read it back column by "
            "column, each thread from its own row, 4 or 16 bytes per read. Nsight Compute, one launch each "
            f"({results.recorded().device}, {next(iter(recs.values()))['date']}):\n\n"
            "| kernel | duration | shared-load instructions | wavefronts | bank-conflict wavefronts |\n"
            f"|---|---|---|---|---|\n{rows}\n\n"
            "Which kernels read 4 bytes per thread and which 16? Which tile is swizzled? Explain each kernel's "
            "wavefronts per instruction from the bank rule.")


def _reads_answer():
    recs = _read_records()
    per = {n: (r["ncu"]["sld_wavefronts"] / r["ncu"]["sld_insts"], r["ncu"]["sld_conflicts"] / r["ncu"]["sld_insts"])
           for n, r in recs.items()}
    lines = "; ".join(f"{k} is `{n}`: {w:.0f} wavefronts per instruction, {c:.0f} of them from conflicts "
                      f"(derived: {recs[n]['config']['passes']} passes, {recs[n]['config']['ideal']} needed)"
                      for k, (n, (w, c)) in zip("ABCD", per.items()))
    plain, swz = recs["read4_plain"]["ms"], recs["read4_swizzled"]["ms"]
    return (f"{lines}. A warp's shared-memory request is served in passes (wavefronts) of at most 128 bytes, one "
            "word per bank per pass. Unswizzled, a column of 128-byte rows sits in one bank (4-byte reads) or one "
            "group of four banks (16-byte reads): every thread's word needs a pass of its own, 32. TMA's 128-byte "
            "swizzle puts chunk c of row r at chunk c XOR (r mod 8), spreading eight rows over the eight bank "
            "groups: 4 passes. A 16-byte read needs 4 passes even without a conflict (a quarter-warp per pass), "
            "so swizzled it has none left; a 4-byte read keeps a 4-way conflict (32 rows on 8 groups). Time "
            f"follows the passes: {plain * 1e3:.0f} against {swz * 1e3:.0f} us for the 4-byte reads "
            f"({plain / swz:.1f}x). Tell the widths apart by the conflicts: at {per['read4_plain'][0]:.0f} passes the "
            f"4-byte read has {per['read4_plain'][1]:.0f} extra, the 16-byte one {per['read16_plain'][1]:.0f} (lesson 06, "
            "section 4: the same counters beside the derivation).")


def _trace_rows():
    store = results.recorded()
    recs = store.select("04", "trace")
    if len(recs) != len(l04.STAGES):
        raise LookupError("no Proton trace of lesson 04: run `python -m kernels.tools.record 04:trace` on the H200")
    return store, recs[0].get("date", store.data.get("date")), l04.trace_rows(recs, l04.probe_times(
        store.select("04", "model")))


def _trace_prompt():
    store, date, rows = _trace_rows()
    table = "\n".join(f"| {r['stages']} | {r['ms']:.3f} ms | {r['cycles_per_step']:,.0f} | {r['tma_wait']:,.0f} | "
                      f"{r['mma_issue']:,.0f} | {r['mma_wait']:,.0f} |" for r in rows)
    return ("A persistent TMA GEMM (8192^3 fp16, 128 x 256 x 64 tiles, one 8-warp CTA per SM) at 1-4 pipeline "
            "stages. Its compiled loop was marked where a warp waits for a stage's TMA bytes, issues its `wgmma` "
            "and waits for a `wgmma`, and traced with Proton (medians per K step, SM cycles; "
            f"{store.device}, {date}):\n\n"
            "| stages | time (do_bench) | cycles a step | waiting for tiles | issuing wgmma | waiting for wgmma |\n"
            f"|---|---|---|---|---|---|\n{table}\n\n"
            "What bounds the loop at each stage count? Why is the wait for a `wgmma` short at three stages although "
            "the math sets the pace there? Why do the cycle ratios and the time ratios disagree?")


def _trace_answer():
    store, _, rows = _trace_rows()
    one, two, three = rows[0], rows[1], rows[2]
    clock = {r["config"]["stages"]: r["ncu"]["sm_hz"] / 1e9 for r in store.select("04", "ncu", "gemm_tma_probe")}
    if not {1, 3} <= set(clock):
        raise LookupError("no ncu records of lesson 04's probe: run `python -m kernels.tools.profile --lesson 04`")
    math_cycles = one["mma_issue"] + one["mma_wait"]
    return (f"One stage is serial: {one['tma_wait']:,.0f} of {one['cycles_per_step']:,.0f} cycles waiting for "
            f"tiles (two waits: unpipelined, A's load is waited for before B's is issued), then the math, issued "
            f"and waited for, {math_cycles:,.0f}: N(C + M). Two stages are still load-bound: {two['tma_wait']:,.0f} of "
            f"{two['cycles_per_step']:,.0f} cycles waiting for tiles. From three, a step is {three['cycles_per_step']:,.0f} "
            f"cycles, about one step's math ({math_cycles:,.0f}): compute-bound, and a fourth stage changes nothing. "
            "The wait for a wgmma is short because the compiled loop waits for the previous one (`pendings = 1`): "
            "the tensor cores run one step's multiply while the warp waits for the next step's tiles and issues the "
            f"next multiply; the warp is not what the loop waits for. Ratios: {three['traced']:.2f} of one stage's "
            f"step in cycles, {three['ms'] / one['ms']:.2f} in do_bench time: the card's SM clock was lower under "
            f"the busier GEMM (ncu read {clock[1]:.2f} GHz at one stage, {clock[3]:.2f} at three), and do_bench's "
            "median of many "
            "launches ran slower than one launch under ncu (lesson 04, sections 3 and 8).")


def whiteboard_items():
    return [
        Item("wb-smem", "pipelining", 2, "whiteboard", _smem_prompt(), _smem_answer, "the course's `kernels/lab/smem.py`"),
        Item("wb-pipeline", "pipelining", 2, "whiteboard",
             f"A GEMM's K loop has N = {PIPE['N']} steps; each step's loads take M = {PIPE['M']:g} us and its math "
             f"C = {PIPE['C']:g} us. How long does the loop take with one stage, with double buffering, and what "
             "does a third stage add?", _pipe_answer, "lesson 04's model (`l04_pipelining.timeline`)"),
        Item("wb-tma", "tma", 2, "whiteboard", _tma_prompt(), _tma_answer, "the course's `kernels/lab/tma_rules.py`"),
        Item("wb-waves", "waves", 2, "whiteboard", _waves_prompt(), _waves_answer, "tiles / SMs"),
        Item("wb-occupancy", "occupancy", 3, "whiteboard", _occupancy_prompt(), _occupancy_answer,
             "the compiled kernel (`cuobjdump -res-usage`)"),
        Item("wb-banks", "banks", 2, "whiteboard", _bank_prompt(), _bank_answer,
             "the bank rule, and lesson 05's `bank_groups`"),
        Item("wb-launch", "profiling", 3, "whiteboard",
             "At 2048^3 the course timed four GEMMs three ways: `do_bench`, replayed from a CUDA graph, and the "
             "host's time per launch. From those figures, which GEMMs does the host hold back, and why does "
             "`do_bench` not show it?", _profiling_answer, "lesson 04's recorded launch run"),
        Item("wb-ncu", "profiling", 3, "whiteboard", _ncu_prompt, _ncu_answer,
             "Nsight Compute on lessons 03 and 04's kernels (`kernels/tools/profile.py`)"),
        Item("wb-ncu-banks", "banks", 3, "whiteboard", _reads_prompt, _reads_answer,
             "Nsight Compute on lesson 06's column reads (`kernels/lessons/profiled.py`)"),
        Item("wb-trace", "profiling", 3, "whiteboard", _trace_prompt, _trace_answer,
             "Proton's trace of lesson 04's GEMM (`kernels/lab/kernel_trace.py`)"),
    ]


# ---- explain this PTX / SASS ----------------------------------------------------------------------

def _explain(key, topic, level, kernel_desc, name, pick, answer, ask="What do these lines do?"):
    def prompt():
        return f"The course compiled {kernel_desc} for sm_90. {ask}\n\n{_code(pick(compiled(name)))}"
    # the origin says "compiled for sm_90" on every machine: the committed pack is the same generated anywhere
    return Item(key, topic, level, "explain", prompt, lambda: f"*Code: compiled for sm_90 by Triton "
                f"{triton.__version__}.*\n\n{answer()}", "the course's compiled kernel")


def _chase_answer():
    body = ptx_excerpt(compiled("chase").ptx, r"^\$L__BB\d+_\d+:", r"\bbra\b")
    return (f"The pointer chase's loop, {len(body)} lines: `mad.wide.s32` turns the index just loaded into an "
            "address (base + 4 x index), `ld.global.cg.b32` loads the next index from there (`.cg`: cached in L2 "
            "only, not L1), then the counter is decremented and the branch loops back. Each load's address is the "
            "previous load's value, so no two loads overlap: the time per iteration is the memory's latency "
            "(lesson 00, section 3). The `mov.u32 ..., 0x0` before the load is the inline PTX Triton wraps "
            "around every load (a default value), not a second access.")


def _cp_async_answer():
    comp = compiled("gemm_pointer")
    n = comp.counts()["cp.async"]
    return ("The main loop of a 3-stage ring, folded by `isa.outline`: wait until at most two commit groups are "
            "pending (`cp.async.wait_group 2`: the oldest stage has landed), `bar.sync` so every warp sees it, "
            "four `wgmma` over the K = 64 slice (16 each), `wgmma.wait_group 1` to keep one group of them in "
            "flight, another barrier (no warp may overwrite a buffer still being read), then issue the next "
            "stage's copies, A's and B's pieces, each group closed by `cp.async.commit_group`, and branch back. "
            f"Each thread issues 16-byte `cp.async.cg` pieces itself ({n} `cp.async` instructions in its code): "
            "that per-thread addressing is what TMA removes (lesson 02, section 2).")


def _tma_copy_answer():
    return ("One thread (the one predicate `%p2` selects) initialises an mbarrier and arms it with `expect_tx` for 16,384 bytes "
            "(the 64 x 128 fp16 tile); a `bar.sync` after it (one of the lines left out here) makes the "
            "initialised barrier visible to every warp, and "
            "`fence.proxy.async` orders the threads' earlier writes to the shared buffer the load fills (where the "
            "device-side maps were staged) before the engine writes into it (lesson 03, section 2). "
            "`elect.sync` picks one thread per warp, and the first two warps each issue one "
            "`cp.async.bulk.tensor.2d` of a 64 x 64 box (the 128-byte swizzle caps a box row at 64 fp16): two "
            "instructions for the whole tile, addresses computed by the engine from the tensor map. Everyone "
            "spins on `mbarrier.try_wait.parity` until the bytes have arrived and the phase flips; then the "
            "barrier is invalidated, and after another proxy fence the tile goes back out with "
            "`cp.async.bulk.tensor ... global.shared::cta.bulk_group`, a TMA store (lesson 03, section 2).")


def _tma_sass_answer():
    return ("The same TMA copy in SASS: `SYNCS.EXCH.64` initialises the mbarrier, `SYNCS.ARRIVE.TRANS64` arms it "
            "with the expected bytes, `UTMALDG.2D` is the TMA load (issued under a uniform predicate, by one "
            "thread), `SYNCS.PHASECHK.TRANS64.TRYWAIT` waits on the barrier's phase, `FENCE.VIEW.ASYNC.S` is "
            "the proxy fence, `UTMASTG.2D` the TMA store, and `UTMACMDFLUSH` / `DEPBAR` wait for it to leave. "
            "No `LDG` or `STG` anywhere: the data never passes through registers.")


def _tma_gemm_answer():
    return ("The TMA GEMM's main loop with 3 stages (`isa.outline`): wait on this stage's mbarrier "
            "(`try_wait.parity`; the phase flips each time the ring wraps), four `wgmma` over the K slice, "
            "`wgmma.wait_group 1` (the previous group must finish before its buffer is refilled), then one "
            "thread arms the next free stage's barrier with `expect_tx` 49,152 bytes (a 128 x 64 A tile and a "
            "64 x 256 B tile in fp16) and two `cp.async.bulk.tensor` load them, and branch back. Compare the "
            "cp.async loop: a handful of instructions by one thread instead of a copy per 16 bytes by every "
            "thread (lesson 04, section 4).")


def wgmma_lines(ptx):
    """The TMA GEMM's wgmma protocol, from its loop's fence to the wait after the loop: each wgmma line and the
    loop's branch, the first `mma_async` shown and the others counted."""
    lines = [ln.split("//")[0].strip() for ln in ptx.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("wgmma.fence"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("wgmma.wait_group.sync.aligned 0"))
    picked = [ln for ln in lines[start:end + 1] if ln.startswith("wgmma.") or re.match(r"@%p\d+ bra", ln)]
    mmas = [ln for ln in picked if ln.startswith("wgmma.mma_async")]
    out = []
    for ln in picked:
        if ln is mmas[0]:
            out += [ln.split("{")[0].strip() + " {acc x 128}, desc_a, desc_b, ...;",
                    f"... {len(mmas) - 1} more wgmma.mma_async into the same accumulator"]
        elif not ln.startswith("wgmma.mma_async"):
            out.append(ln)
    return _clean(out)


def _wgmma_answer():
    comp = compiled("gemm_tma")
    mmas = comp.ptx.count("wgmma.mma_async")
    return ("`wgmma` is asynchronous: the warpgroup issues it and goes on while the tensor cores work, and until a "
            "wait covers it its accumulator registers belong to the tensor cores.\n\n"
            "- `wgmma.fence`: the warpgroup's own earlier writes to the registers a `wgmma` reads (the "
            "accumulator, and A where it comes from registers) are ordered before it; needed before the first "
            "`wgmma` of each step.\n"
            f"- `wgmma.mma_async ... m64n256k16`: each multiplies a 64 x 16 slice of A by a 16 x 256 slice of B "
            f"from shared memory, through their descriptors, into the warpgroup's 64 x 256 fp32 accumulator; "
            f"the loop's {mmas} cover the 64 of K a stage holds (64 / 16).\n"
            "- `wgmma.commit_group`: they become one group.\n"
            "- `wgmma.wait_group 1`: wait until at most one group is still running. The previous step's group is "
            "done, so the stage it read may be refilled by the next TMA load; this step's group keeps running "
            "under the loop's next wait and loads. `wait_group 0` would idle the tensor cores at every step.\n"
            "- after the loop, `wgmma.wait_group 0`: every group done before the epilogue reads the accumulator.\n"
            "\nWhat breaks without them: reading or writing the accumulator (a scale, a conversion, a store) or "
            "refilling a stage before the wait that covers the group using it. The PTX ISA makes touching the "
            "registers of a `wgmma` before its wait undefined (PTX ISA, section 'Asynchronous Warpgroup Level "
            "Matrix Multiply-Accumulate', `wgmma.wait_group`): nothing says which values are read. It is also "
            "why a scale applied at every K step costs more than a multiply (lesson 08, misconception 2): touching "
            "the accumulator at every step needs a `wait_group 0` at every step.")


def explain_items():
    return [
        _explain("ex-chase", "memory", 2, "the pointer chase (`latency.chase_kernel`, `.cg` loads)", "chase",
                 lambda c: ptx_excerpt(c.ptx, r"^\$L__BB\d+_\d+:", r"\bbra\b"), _chase_answer),
        _explain("ex-cp-async", "cp.async", 2, "the pointer GEMM (128 x 256 x 64, 3 stages)", "gemm_pointer",
                 lambda c: loop_outline(c.ptx), _cp_async_answer),
        _explain("ex-tma-copy", "tma", 3, "the TMA tile copy (64 x 128 fp16, device-side tensor maps)", "tma_copy",
                 lambda c: ptx_excerpt(c.ptx, r"mbarrier\.init", r"global\.shared::cta\.bulk_group",
                                       keep=("mbarrier", "cp.async", "fence", "elect", "bra")), _tma_copy_answer),
        _explain("ex-tma-sass", "tma", 2, "the TMA tile copy (64 x 128 fp16)", "tma_copy",
                 lambda c: sass_lines(c.sass, r"^(@!?U?P\w+ )?(SYNCS|UTMALDG|UTMASTG|UTMACMDFLUSH|DEPBAR|FENCE)",
                                      start=r"SYNCS\.EXCH", limit=10),
                 _tma_sass_answer),
        _explain("ex-tma-gemm", "pipelining", 3, "the TMA GEMM (128 x 256 x 64, 3 stages)", "gemm_tma",
                 lambda c: loop_outline(c.ptx), _tma_gemm_answer),
        _explain("ex-wgmma", "pipelining", 3, "the TMA GEMM (128 x 256 x 64, 3 stages)", "gemm_tma",
                 lambda c: wgmma_lines(c.ptx), _wgmma_answer,
                 ask="What does each of these lines do, and what would break without it?"),
        _explain("ex-spill", "occupancy", 2, "lesson 01's tile copy with a 128 x 256 fp16 tile on one warp", "spill",
                 lambda c: sass_lines(c.sass, r"^(LDG|STL|LDL|STG)", limit=8), _spill_answer),
        _explain("ex-fp8", "fp8", 3, "the TMA GEMM with fp16 operands and again with e4m3 operands", "gemm_tma_fp8",
                 lambda c: _clean([next(ln for ln in compiled(n).ptx.splitlines() if "wgmma.mma_async" in ln)
                                   for n in ("gemm_tma", "gemm_tma_fp8")], width=90), _fp8_answer),
    ]


def extra_items():
    """The added topics' questions, then the whiteboard problems, then the PTX/SASS prompts."""
    added = []
    count = {}
    for topic, level, q, a in ADDED:
        count[topic] = count.get(topic, 0) + 1
        added.append(Item(f"{topic}-{count[topic]}", topic, level, "question", q, a, "the interview pack"))
    return added + whiteboard_items() + explain_items()
