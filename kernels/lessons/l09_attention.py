"""Lesson 09: attention, every data-movement idea of the course in one kernel. The online softmax; the course's
FlashAttention-style forward (kernels/ops/attention.py) checked against SDPA; the bytes it saves against three
kernels that write S and P out; the shared-memory budget of Q and the K/V ring; its compiled code; its speed against
SDPA's cuDNN and flash backends from 1k to 16k tokens; and decode, where one query a sequence makes it a
bandwidth problem that split-KV answers."""
import dataclasses
import functools
import math
import re

import torch

from ..lab import aot, isa, measure, plots, results as recorded_results, smem
from ..lab.mode import DEVICE, sm_count
from ..lab.widgets import Widget
from ..ops import attention as att

LESSON = "09"
NEEDS = "hopper"  # TMA tensor maps and wgmma: sm_90
SEQS = (1024, 2048, 4096, 8192, 16384)
TOKENS = 16384       # batch x seq at every length (batch = TOKENS // seq) and heads x head_dim = 2048, as the
WIDTH = 2048         # FlashAttention papers' forward benchmarks: 16 heads of 128 or 32 of 64
DTYPES = ("float16", "bfloat16")
BACKENDS = ("cudnn", "flash")   # SDPA's backends a user would pick on Hopper; "efficient" is 2-3x slower here
DECODE_SHAPES = [(1, 32, 16384), (1, 32, 65536), (4, 32, 16384), (32, 32, 8192)]  # batch, heads, seq_k; D = 128
SPLITS = (1, 2, 4, 8, 16, 32, 64)  # split-KV swept at the first decode shape
BAR = 0.9  # the course's bar: at least 0.9x SDPA's faster backend at head dim 128


def shape(seq, head_dim):
    """(batch, heads, seq, head_dim) of the benchmark at ``seq``."""
    return (TOKENS // seq, WIDTH // head_dim, seq, head_dim)


def operands(B, H, seq_q, D, dtype="float16", seq_k=None):
    """Fresh normal Q, K, V (K and V ``seq_k`` long, ``seq_q`` by default) on the course's device."""
    dt = getattr(torch, dtype)
    return [torch.randn(B, H, s, D, dtype=dt, device=DEVICE) for s in (seq_q, seq_k or seq_q, seq_k or seq_q)]


def sdpa(backend, q, k, v, causal=False):
    """torch's scaled_dot_product_attention on one backend (``"cudnn"``, ``"flash"``), as a user calls it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    with sdpa_kernel(which):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def reference(q, k, v, causal=False):
    """SDPA in fp32, causal aligned at the sequences' ends (a bottom-right mask passed to it: its is_causal=True is
    top-left); a row that sees no key is 0."""
    seq_q, seq_k = q.shape[2], k.shape[2]
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).tril(seq_k - seq_q) if causal else None
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    return torch.nan_to_num(ref)


# ---- measured runs ---------------------------------------------------------------------------------------------

def measure_versus():
    """The course's kernel (its ``CONFIGS`` tile) against SDPA's cuDNN and flash backends at every length, head dim
    64 and 128, fp16 and bf16, causal and not: the three timed in turn (``measure.timed``: medians of three rounds),
    the kernel's output first checked against cuDNN's (the output poisoned with NaN first). TFLOP/s count
    ``att.flops`` (causal: half the pairs)."""
    records = []
    for D in att.HEAD_DIMS[::-1]:
        for dtype in DTYPES:
            for causal in (False, True):
                for seq in SEQS:
                    B, H, S, _ = shape(seq, D)
                    q, k, v = operands(B, H, S, D, dtype)
                    o = torch.empty_like(q)
                    variants = [(f"sdpa_{b}", {"causal": causal}, functools.partial(sdpa, b, q, k, v, causal))
                                for b in BACKENDS]
                    variants.append(("attention", {"causal": causal, **att.CONFIGS[D, causal]},
                                     lambda: att.attention(q, k, v, causal=causal, out=o)))
                    recs = measure.timed(variants, o, sdpa("cudnn", q, k, v, causal), 1e-2,
                                         checked=lambda name, cfg: name == "attention", shape=(B, H, S, D),
                                         flops=att.flops(B, H, S, S, D, causal))
                    records += [{**r, "dtype": dtype} for r in recs]
    return records


def decode_bytes(B, H, seq_k, D=128, esize=2):
    """What one decode step must move at least: K and V read, Q read and O written."""
    return (2 * B * H * seq_k * D + 2 * B * H * D) * esize


def measure_decode():
    """Decode, one query a sequence against a long K/V (head dim 128, fp16): SDPA's two backends, the course's
    kernel with one program per (batch, head) and with ``att.decode_splits`` splits, and a torch copy of as many
    bytes (read and written: the bandwidth roof, measured in the same turn). At the first shape, every split count
    of ``SPLITS`` too. GB/s count ``decode_bytes``."""
    records = []
    sms = sm_count(torch.empty(0, device=DEVICE))
    for i, (B, H, S) in enumerate(DECODE_SHAPES):
        q, k, v = operands(B, H, 1, 128, seq_k=S)
        o = torch.empty_like(q)
        nbytes = decode_bytes(B, H, S)
        x = torch.randn(nbytes // 4, device=DEVICE, dtype=torch.float16)  # half the bytes: a copy reads and writes
        y = torch.empty_like(x)
        best = att.decode_splits(B * H, S, sms)
        counts = SPLITS if i == 0 else sorted({1, best})
        variants = [(f"sdpa_{b}", {}, functools.partial(sdpa, b, q, k, v)) for b in BACKENDS]
        variants.append(("torch_copy", {}, lambda: y.copy_(x)))
        variants += [("attention_decode", {**att.DECODE, "splits": n, "chosen": n == best},
                      functools.partial(att.attention, q, k, v, splits=n, out=o, **att.DECODE)) for n in counts]
        records += measure.timed(variants, o, sdpa("cudnn", q, k, v), 1e-2,
                                 checked=lambda name, cfg: name == "attention_decode", shape=(B, H, 1, S),
                                 nbytes=nbytes)
    return records


def versus():
    return measure.run(LESSON, "versus", measure_versus, NEEDS)


def decode():
    return measure.run(LESSON, "decode", measure_decode, NEEDS)


# ---- views: what the lesson reads and shows ----------------------------------------------------------------------

def online_softmax(scores, block):
    """The online softmax of one row of ``scores`` (fp32, CPU), ``block`` scores at a time: [(block, running max,
    alpha, running sum)] after each block (alpha: the factor what was summed before was rescaled by), and the
    softmax it ends with (each exp(x - m) kept, rescaled when m grows)."""
    m, l, weights, steps = float("-inf"), 0.0, torch.empty(0), []
    for start in range(0, len(scores), block):
        x = scores[start:start + block]
        m_new = max(m, x.max().item())
        alpha = math.exp(m - m_new)  # 0 at the first block (m = -inf): nothing was summed yet
        p = torch.exp(x - m_new)
        l = l * alpha + p.sum().item()
        weights = torch.cat([weights * alpha, p])
        m = m_new
        steps.append((start // block, m, alpha, l))
    return steps, weights / l


def movement(seq_k, head_dim=128, BLOCK_M=128):
    """[(what, bytes)] one block of ``BLOCK_M`` queries moves, fused and as three kernels (``att``)."""
    fused = att.bytes_per_query_block(BLOCK_M, seq_k, head_dim)
    unfused = att.bytes_per_query_block(BLOCK_M, seq_k, head_dim, fused=False)
    return [("fused (Q, O once; all of K and V)", fused), ("three kernels (+ S and P out and back)", unfused)]


def head_traffic(seq, head_dim=128, esize=2):
    """(fused, unfused) bytes one head moves to and from HBM at least: Q, K, V read and O written once; unfused, S and
    P (seq x seq) each written and read back too. Their ratio is 1 + seq / head_dim."""
    fused = 4 * seq * head_dim * esize
    return fused, fused + 4 * seq * seq * esize


def versus_rows(records):
    """[(head_dim, dtype, causal, seq, course, cudnn, flash)] records, in the order they were measured."""
    rows = {}
    for r in records:
        B, H, S, D = r["shape"]
        rows.setdefault((D, r["dtype"], r["config"]["causal"], S), {})[r["name"]] = r
    return [(*key, at.get("attention"), at.get("sdpa_cudnn"), at.get("sdpa_flash")) for key, at in rows.items()
            if len(at) == 3]


def ratio(course, *others):
    """The course's time against the fastest of ``others`` (>1: the course is faster)."""
    return min(o["ms"] for o in others) / course["ms"]


def print_versus(records, label):
    for D, dtype, causal, S, ours, cudnn, flash in versus_rows(records):
        faster = "cuDNN" if cudnn["ms"] <= flash["ms"] else "flash"
        print(f"D={D:3d} {dtype:8s} {'causal' if causal else 'full  '} {S:5d}: course {ours['tflops']:4.0f} | cuDNN "
              f"{cudnn['tflops']:4.0f} | flash {flash['tflops']:4.0f} TFLOP/s -> {ratio(ours, cudnn, flash):.2f}x "
              f"{faster}")
    print(label)


def bars(records):
    """Per (head dim, dtype, causal): the lowest and the geometric mean of the course's ratio to SDPA's faster
    backend over the lengths, and whether the lowest reaches ``BAR``."""
    by = {}
    for D, dtype, causal, S, ours, cudnn, flash in versus_rows(records):
        by.setdefault((D, dtype, causal), []).append(ratio(ours, cudnn, flash))
    return {key: (min(r), math.exp(sum(map(math.log, r)) / len(r)), min(r) >= BAR) for key, r in by.items()}


def plot_versus(records, label, head_dim=128, dtype="float16"):
    """TFLOP/s against the length, full and causal, at one head dim and dtype: the course and SDPA's two backends."""
    fig, axes = plots.subplots((9, 3.2), 1, 2, layout="tight")
    for ax, causal in zip(axes, (False, True)):
        rows = [r for r in versus_rows(records) if r[0] == head_dim and r[1] == dtype and r[2] == causal]
        seqs = [r[3] for r in rows]
        for pick, what, style in ((4, "course (Triton)", "o-"), (5, "SDPA cuDNN", "s--"), (6, "SDPA flash", "^:")):
            ax.plot(seqs, [r[pick]["tflops"] for r in rows], style, label=what)
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqs, [f"{s // 1024}k" for s in seqs])
        ax.set(xlabel="sequence length", ylabel="TFLOP/s", ylim=(0, None),
               title=f"{'causal' if causal else 'full'}, head dim {head_dim}, {dtype}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.suptitle(label, fontsize=8)
    plots.show(fig)


def decode_rows(records):
    """[(shape, {name or "split N": record})] per decode shape, in the order measured."""
    out = {}
    for r in records:
        name = f"split {r['config']['splits']}" if r["name"] == "attention_decode" else r["name"]
        out.setdefault(tuple(r["shape"]), {})[name] = r
    return list(out.items())


def print_decode(records, label):
    for (B, H, _, S), at in decode_rows(records):
        chosen = next(r for r in at.values() if r["config"].get("chosen"))
        n = chosen["config"]["splits"]
        split = f"{n} splits (decode_splits) {chosen['gbps']:5.0f}" if n > 1 else "(decode_splits: 1)"
        print(f"B={B:2d} H={H} seq_k={S:5d}: roof (torch copy) {at['torch_copy']['gbps']:5.0f} GB/s | cuDNN "
              f"{at['sdpa_cudnn']['gbps']:5.0f} | flash {at['sdpa_flash']['gbps']:5.0f} | course, one program a head "
              f"{at['split 1']['gbps']:5.0f}, {split}")
    print(label)


def plot_splits(records, label):
    """GB/s of the course's decode kernel at each split count (the first decode shape), against the roof and SDPA."""
    (B, H, _, S), at = decode_rows(records)[0]
    splits = sorted(r["config"]["splits"] for n, r in at.items() if n.startswith("split"))
    fig, ax = plots.subplots((6, 3), layout="tight")
    ax.plot(splits, [at[f"split {n}"]["gbps"] for n in splits], "o-", label="course, split-KV")
    for name, what, style in (("torch_copy", "torch copy (roof)", "k-"), ("sdpa_cudnn", "SDPA cuDNN", "--"),
                              ("sdpa_flash", "SDPA flash", ":")):
        ax.axhline(at[name]["gbps"], linestyle=style[-1] if style != "k-" else "-", color="k" if name == "torch_copy"
                   else None, label=what, linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(splits, [str(n) for n in splits])
    ax.set(xlabel="splits of the keys", ylabel="GB/s", ylim=(0, None),
           title=f"decode: {B} x {H} heads, one query, {S // 1024}k keys, head dim 128\n{label}")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
    plots.show(fig)


def descriptors(B, H, S, D, BLOCK_M, BLOCK_N, dtype=torch.float16):
    """The four tensor maps of a launch at this shape and tile (on the course's device; nothing is launched)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    return [TensorDescriptor.from_tensor(torch.empty(B * H, S, D, dtype=dtype, device=DEVICE), [1, block, D])
            for block in (BLOCK_M, BLOCK_N, BLOCK_N, BLOCK_M)]


def compile_sm90(head_dim=128, causal=False, warp_specialize=False, **tile):
    """The kernel's sm_90 code at the benchmark's 4k shape (``CONFIGS[head_dim, causal]`` unless ``tile`` says
    otherwise)."""
    cfg = {**att.CONFIGS[head_dim, causal], **tile}
    B, H, S, D = shape(4096, head_dim)
    return aot.compile_sm90(att.attention_kernel, *descriptors(B, H, S, D, cfg["BLOCK_M"], cfg["BLOCK_N"]), S, S,
                            att.LOG2E / math.sqrt(D), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=D,
                            CAUSAL=causal, stages=cfg["stages"], num_warps=cfg["num_warps"],
                            WARP_SPECIALIZE=warp_specialize)


def gemm_operands(compiled):
    """{GEMM: (wgmma count, imm-trans-b)} read from the PTX (NVIDIA, PTX ISA, wgmma.mma_async: for 16-bit types the
    last operand, imm-trans-b, is 1 where B is read transposed from shared memory). S = Q K^T takes A (Q) from shared
    memory through a descriptor; O += P V takes A (P) from registers, a brace-enclosed list."""
    found = {}
    for w in re.findall(r"wgmma\.mma_async\.[^;]*;", compiled.ptx):
        gemm = "O += P V" if w.count("{") >= 2 else "S = Q K^T"  # the accumulator's list, and P's if A is registers
        n, flags = found.get(gemm, (0, set()))
        found[gemm] = (n + 1, flags | {int(w.rstrip(";").rsplit(",", 1)[1])})
    return {gemm: (n, flags.pop() if len(flags) == 1 else sorted(flags)) for gemm, (n, flags) in found.items()}


def evidence(compiled):
    """{what: count} of the code that moves and multiplies: TMA loads and stores, wgmma, mbarrier waits, the
    exponentials (MUFU.EX2), global stores other than O's (S and P would need them), register spills, setmaxnreg."""
    c, ops = compiled.counts(), isa.opcodes(compiled.sass)
    return {"TMA loads (UTMALDG)": c["UTMALDG"], "TMA stores (UTMASTG)": c["UTMASTG"],
            "wgmma (HGMMA)": c["HGMMA"], "mbarrier (SYNCS)": c["SYNCS"], "exp2 (MUFU.EX2)": ops["MUFU.EX2"],
            "plain global stores (STG)": sum(v for k, v in c.items() if k.startswith("STG ")),
            "spill stores and loads (STL, LDL)": ops["STL"] + ops["LDL"],
            "register re-allocation (USETMAXREG)": ops["USETMAXREG"]}


def warp_specialized_at_4_warps():
    """What Triton 3.6 says when asked to warp-specialise the course's 4-warp tile: the first line of its error (the
    compiler's dump, printed to the process's own output, kept out of the cell), or None if it compiles."""
    from ..lab.aot import CompileError
    from ..lab.kernel_trace import quiet
    try:
        with quiet():
            compile_sm90(128, warp_specialize=True)
    except CompileError as e:
        return str(e).splitlines()[0]
    return None


SM_SHARED = 233_472   # shared memory per SM on Hopper (228 KiB), of which each resident block also reserves 1 KiB
SM_REGISTERS = 65_536  # 32-bit registers per SM


def blocks_per_sm(compiled):
    """(by registers, by shared memory): how many blocks of ``compiled`` one SM can hold, from what ptxas allotted
    (``isa.resources``: registers per thread, allocated per warp in units of 256) and the compiled shared memory."""
    regs = isa.resources(compiled.cubin)["REG"]
    per_warp = -(-regs * 32 // 256) * 256
    return SM_REGISTERS // (per_warp * compiled.num_warps), SM_SHARED // (compiled.shared + 1024), regs


# ---- the widget ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class AttentionQuery(measure.Query):
    """The course's kernel at one tile against SDPA's cuDNN backend at the 4k benchmark shape, fp16, full."""
    against: str = "sdpa_cudnn"
    needs: str = NEEDS

    unit = "tflops"

    def setup(self):
        B, H, S, D = self.shape
        q, k, v = operands(B, H, S, D)
        o = torch.empty_like(q)
        return measure.Live(lambda: self.launch(q, k, v, o), lambda: sdpa("cudnn", q, k, v),
                            att.flops(B, H, S, S, D), out=o, ref=sdpa("cudnn", q, k, v), tol=1e-2)


class AttentionTiles(Widget):
    """Q's tile height, the K/V tile, the ring's stages and the head dim: the budget, the code, the figure."""
    lesson = LESSON
    sliders = dict(BLOCK_M=[64, 128], BLOCK_N=[32, 64, 128], stages=[1, 2, 3, 4], head_dim=[64, 128])
    defaults = dict(BLOCK_M=128, BLOCK_N=64, stages=2, head_dim=128)
    title, base_label = "attention, 4k tokens, full, fp16", "SDPA cuDNN"

    def tile(self, cfg):
        return dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], stages=cfg["stages"], num_warps=4)

    def compile(self, cfg):
        return compile_sm90(cfg["head_dim"], **self.tile(cfg))

    def budget(self, cfg, compiled):
        D = cfg["head_dim"]
        return smem.Budget(cfg["stages"], 2 * cfg["BLOCK_N"] * D * 2, output_tile=cfg["BLOCK_M"] * D * 2,
                           compiled=compiled.shared)

    def evidence(self, cfg, compiled):
        e = evidence(compiled)
        D, BN = cfg["head_dim"], cfg["BLOCK_N"]
        by_regs, by_smem, regs = blocks_per_sm(compiled)
        return [f"one stage: a K and a V tile, {BN} x {D} fp16 each = {2 * BN * D * 2 // 1024} KiB; Q's (and O's) "
                f"tile {cfg['BLOCK_M']} x {D} = {cfg['BLOCK_M'] * D * 2 // 1024} KiB",
                f"blocks an SM: {min(by_regs, by_smem)} ({by_regs} by registers, {regs} a thread; {by_smem} by shared "
                "memory)",
                f"code: {e['TMA loads (UTMALDG)']} UTMALDG, {e['wgmma (HGMMA)']} HGMMA, {e['exp2 (MUFU.EX2)']} "
                f"MUFU.EX2 ({compiled.origin})"]

    def query(self, cfg):
        tile = self.tile(cfg)
        return AttentionQuery(LESSON, "tiles", "attention", tile, shape(4096, cfg["head_dim"]),
                              lambda q, k, v, o: att.attention(q, k, v, out=o, **tile))

    def label(self, cfg):
        return f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}, {cfg['stages']} stages, head dim {cfg['head_dim']}"

    def sweep(self, settings=None):
        """The sweep per head dim: each has its own shape (heads x head dim = 2048), so its own cuDNN baseline."""
        every = list(settings or self.settings())
        return [r for D in self.sliders["head_dim"] for r in super().sweep([s for s in every if s["head_dim"] == D])]


attention_tiles = AttentionTiles()

RUNS = {"versus": measure_versus, "decode": measure_decode, "tiles": lambda: attention_tiles.sweep()}


def tiles():
    """The widget's sweep: the recorded one wherever one is recorded (it compiles and times every setting, two
    minutes: redo it with ``python -m kernels.tools.record 09:tiles``), else measured now on a Hopper GPU."""
    store = recorded_results.recorded()
    found = store.select(LESSON, "tiles")
    if found:
        return measure.Run(found, measure.recorded_label(store, found))
    return measure.run(LESSON, "tiles", RUNS["tiles"], NEEDS)


def best_tiles(records, top=3):
    """Per head dim, the ``top`` fastest tiles of the sweep: [(head_dim, [(config, TFLOP/s, ratio to cuDNN)])]."""
    out = []
    for D in att.HEAD_DIMS[::-1]:
        at = [r for r in records if r["shape"][3] == D]
        base = next((r for r in at if r["name"] == "sdpa_cudnn"), None)
        ranked = sorted((r for r in at if r["name"] == "attention"), key=lambda r: r["ms"])[:top]
        out.append((D, [(r["config"], r["tflops"], base["ms"] / r["ms"] if base else float("nan")) for r in ranked]))
    return out
