"""The check behind exercises/04_pipelining.ipynb: a persistent TMA GEMM with a fused epilogue,
C = relu(A @ B + bias). Fewer programs than tiles must walk every tile; the K loop's loads must be
pipelined into a ring; the epilogue must add the bias (masked at the edge), apply the ReLU and leave
through the C descriptor, all checked in values and in the compiled sm_90 code."""
import random
import re

import torch

from ..lab import aot, check as lab_check, smem, trace
from ..lab.mode import DEVICE, INTERPRET
from ..ops import gemm

TILE = (64, 32, 16)  # BLOCK_M, BLOCK_N, BLOCK_K of the values check (small: it runs in the interpreter; three
# different sizes, so a BLOCK_M, BLOCK_N or BLOCK_K where another belongs does not go unseen)
GROUP_M = 2  # fewer row tiles per group than every shape checked has: a walk that gets the number of column
# tiles wrong maps some tiles twice (with 8, the whole of C is one group, and the column count never matters)
PROGRAMS = 3  # fewer than the tiles of every shape checked: only a persistent walk covers them all
CODE_TILE, CODE_STAGES = (128, 128, 64), 3  # what the compiled code is read at


def _shape(largest=None):
    """A ragged M x N x K whose tiles outnumber the programs and are not a multiple of them (a walk that
    splits the tiles evenly and drops the rest is caught); N and K multiples of 8 (16-byte rows for TMA).
    ``largest`` (0, 1 or 2): M, N or K the largest by far, so a count written with the wrong one is wrong. With M
    the largest, the row tiles are not a multiple of GROUP_M: a grouped walk given the wrong number of row tiles
    goes wrong in the last group."""
    while True:
        sizes = [random.randint(130, 200), 8 * random.randint(17, 25), 8 * random.randint(9, 25)]
        if largest is not None:
            sizes[largest] = 8 * random.randint(50, 70)
        M, N, K = sizes
        if (-(-M // TILE[0]) * -(-N // TILE[1])) % PROGRAMS and (largest != 0 or -(-M // TILE[0]) % GROUP_M):
            return M, N, K


def _tile_walk(out, programs):
    """What a persistent walk that missed tiles did, from the tiles it wrote."""
    BM, BN = TILE[:2]
    M, N = out.shape
    tm, tn = -(-M // BM), -(-N // BN)
    written = sum(bool((~lab_check.unwritten(out[r * BM:(r + 1) * BM, c * BN:(c + 1) * BN])).any())
                  for r in range(tm) for c in range(tn))
    if written == programs:
        return (f"only {written} of the {tm * tn} tiles were written, one per program: each program must walk the "
                "tiles, t = program_id, program_id + num_programs, ... while t < tiles "
                "(tl.range(tl.program_id(0), tiles, tl.num_programs(0)))")
    return (f"{written} of the {tm * tn} tiles were written by {programs} programs: the walk misses some; program p "
            "takes tiles p, p + P, p + 2P, ... up to the last one, with P = tl.num_programs(0)")


_STEP = ("each program must step by the number of programs: tl.range(tl.program_id(0), tiles, "
         "tl.num_programs(0))")


def _redone(writers):
    """What a walk whose programs redo each other's tiles did, from who wrote each tile; None if none did."""
    BM, BN = TILE[:2]
    firsts = writers[::BM, ::BN]  # each tile's first element: the whole tile has the same writers
    several = [(r, c) for r in range(firsts.shape[0]) for c in range(firsts.shape[1])
               if len(lab_check.programs_of(firsts[r, c])) > 1]
    if not several:
        return None
    r, c = several[0]
    by = lab_check.programs_of(firsts[r, c])
    zero = sum(1 for bits in firsts.flatten().tolist() if bits & 1)
    return (f"the values are right, but {len(several)} of the {firsts.numel()} tiles were computed by more than one "
            f"program (tile ({r}, {c}) by programs {', '.join(map(str, by))}; program 0 computed {zero} of the "
            f"{firsts.numel()} tiles): {_STEP}")


def steps_by_programs(ptx):
    """Whether the compiled code uses the number of programs (%nctaid.x) for anything but the address of the
    program's own scratch space for its descriptors (one mad.lo): a walk that steps by it adds it (or divides by
    it for a trip count). On the GPU, where no store can be traced to its program, this is what shows the walk."""
    regs = re.findall(r"mov\.u32\s+(%r\d+),\s*%nctaid\.x;", ptx)
    uses = [line for line in ptx.splitlines() if "%nctaid" not in line
            and any(re.search(re.escape(r) + r"\b", line) for r in regs)]
    return any(not line.strip().startswith("mad.lo") for line in uses)


def _columns(cols, N):
    """Columns of C in words, the last one named as such."""
    names = [f"{c} (the last, N - 1)" if c == N - 1 else str(c) for c in cols[:6]]
    more = f" and {len(cols) - 6} more" if len(cols) > 6 else ""
    return ("column " if len(cols) == 1 else "columns ") + ", ".join(names) + more


def _wrong_columns(out, ref, product):
    """When the elements off by more than fp16 rounding lie in a few columns of C: those columns in words, and
    why, if C there is the product without its bias; else None."""
    off = lab_check.rounding_off(out, ref)
    M, N = out.shape
    cols = off.any(0).nonzero().flatten().tolist()
    if not cols or len(cols) * 4 > N:
        return None
    rows = int(off.any(1).sum())
    nobias = lab_check.rounding_off(out[:, cols], torch.relu(product)[:, cols])
    why = (": C there is relu(A @ B), without its bias; the bias mask lets too few columns through: "
           "mask=cols < N, cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)") if not nobias.any() else (
           ": the epilogue gets those columns wrong; check the bias load's offsets and mask")
    return f"{_columns(cols, N)} of C wrong in {rows} of its {M} rows, the rest right{why}"


def _element_by_element(out, ref, product):
    """Fail where elements are off by more than fp16 rounding although C as a whole is within tolerance, naming
    the columns (one column wrong in a few hundred hides under a relative error over all of C)."""
    off = lab_check.rounding_off(out, ref)
    if not off.any():
        return
    columns = _wrong_columns(out, ref, product)
    if columns:
        raise AssertionError(columns)
    raise AssertionError(f"{int(off.sum())} elements are off by more than fp16 rounding ({lab_check.where(off)}), "
                         "although C as a whole is within 1e-2: check the epilogue's indexing and the fp32 accumulator")


def _values(matmul, kernel=None):
    BM, BN, BK = TILE
    for M, N, K in [_shape(largest) for largest in range(3)]:  # M, then N, then K the largest
        a, b, bias = lab_check.operand(M, K), lab_check.operand(K, N), lab_check.operand(N)
        out = lab_check.poisoned(M, N)
        layout = trace.Gemm(("A", "mk"), ("B", "kn"), ("C", "mn"), dict(M=M, N=N, K=K, BLOCK_M=BM, BLOCK_N=BN,
                                                                          BLOCK_K=BK), bias="bias")
        try:
            with lab_check.program_writes(out) as writers, trace.watching(layout, A=a, B=b, C=out, bias=bias) as seen:
                if matmul(a, b, bias, BM, BN, BK, 2, programs=PROGRAMS, out=out, GROUP_M=GROUP_M) is None:
                    raise NotImplementedError
        except Exception as e:  # the interpreter checks what TMA would refuse or silently get wrong
            if "must be 16-byte aligned" not in str(e) or isinstance(e, trace.Diagnosis):
                raise
            raise AssertionError("a descriptor load or store starts at a coordinate that is not a multiple of 16 "
                                 "bytes (8 fp16 elements), which the interpreter refuses: descriptor coordinates are "
                                 "element indices, so step k of the K loop starts at k * BLOCK_K") from None
        if (out == 0).all():
            raise lab_check.NotAttempted("the output came out all zeros: the kernel body is still the stub")
        af, bf, biasf = a.float(), b.float(), bias.float()
        product = af @ bf
        steps = -(-K // BK)
        k_as_step = sum(af[:, k:k + BK] @ bf[k:k + BK, :] for k in range(steps))
        floor = out[~lab_check.unwritten(out)].float().min().item() if (~lab_check.unwritten(out)).any() else 0.0
        candidates = [("A @ B + bias: the ReLU is missing", product + biasf),
                      (f"max(A @ B + bias, {floor:g}): the ReLU clamps at {floor:g} where 0 belongs, "
                       "tl.maximum(x, 0.0)", torch.clamp(product + biasf, min=floor)),
                      ("relu(A @ B): the bias is missing", torch.relu(product)),
                      ("relu(A @ B) + bias: the ReLU comes before the bias", torch.relu(product) + biasf),
                      ("relu(A @ B + the bias of the first column tile): every tile adds bias[0:BLOCK_N]; offset "
                       "the bias by the tile's column, pid_n * BLOCK_N", torch.relu(product + biasf[
                           torch.arange(N, device=out.device) % BN])),
                      ("A @ B: the epilogue is missing", product),
                      ("relu(sum over steps k of A[:, k:k+BLOCK_K] @ B[k:k+BLOCK_K, :] + bias): the loads' K "
                       "coordinate is the step number; it is in elements, k * BLOCK_K",
                       torch.relu(k_as_step + biasf))]
        ref = torch.relu(product + biasf)
        try:
            lab_check.compare_tiles(f"{M}x{K} @ {K}x{N}", out, ref, 1e-2, BM, BN, candidates)
        except AssertionError as e:
            told = trace.after(seen, layout, e)
            if told is not e:
                raise told from None
            dropped = kernel is not None and lab_check.dropped_dot(kernel)
            if dropped:
                raise AssertionError(lab_check.dropped_dot_message(dropped)) from None
            if lab_check.unwritten(out).any():
                raise AssertionError(f"{e}; {_tile_walk(out, PROGRAMS)}") from None
            columns = not torch.isnan(out).any() and _wrong_columns(out, ref, product)
            if columns:
                raise AssertionError(f"{e}; {columns}") from None
            raise
        told = trace.after(seen, layout)
        if told:
            raise told
        _element_by_element(out, ref, product)
        redone = writers is not None and _redone(writers)
        if redone:
            raise AssertionError(redone)
    if not INTERPRET and kernel is not None and not steps_by_programs(
            compile_sm90(kernel, *CODE_TILE, CODE_STAGES).ptx):
        raise AssertionError("the values are right, but the compiled code's tile loop never uses the number of "
                             "programs (tl.num_programs(0), %nctaid.x), so the programs redo each other's tiles: "
                             + _STEP)
    return f"within 1e-2 of torch on three ragged shapes, {PROGRAMS} programs walking all the {BM}x{BN} tiles"


def compile_sm90(kernel, BLOCK_M, BLOCK_N, BLOCK_K, stages, shape=(4096, 4096, 4096)):
    """The sm_90 code of the learner's kernel: gemm.matmul_kernel's arguments, then the bias."""
    M, N, K = shape
    a, b, c = (torch.empty(*s, device=DEVICE, dtype=torch.float16) for s in ((M, K), (K, N), (M, N)))
    _, args, meta = gemm.launch_args(a, b, c, BLOCK_M, BLOCK_N, BLOCK_K, stages)
    return aot.compile_sm90(kernel, *args, torch.empty(N, device=DEVICE, dtype=torch.float16), **meta)


_OPERANDS = ((0, "A", "a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])"),  # (kernel parameter, operand, its load)
             (1, "B", "b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])"))


def _ring(kernel):
    compiled = lab_check.require_kept_dot(compile_sm90(kernel, *CODE_TILE, CODE_STAGES), kernel)
    if not compiled.counts()["cp.async.bulk.tensor load"]:
        raise AssertionError("no cp.async.bulk.tensor loads in the compiled code: load the A and B tiles through "
                             "a_desc and b_desc, not with tl.load on pointers")
    loaded = {param for kind, param in lab_check.tma_copies(compiled.ptx) if kind == "load"}
    if None not in loaded:  # each TMA load traced to the pointer its descriptor was made from
        for param, name, load in _OPERANDS:
            if param not in loaded:
                other = next(n for p, n, _ in _OPERANDS if p != param)
                raise AssertionError(f"{name} is not loaded through a descriptor: the compiled code's "
                                     f"cp.async.bulk.tensor loads all read {other}, so {name}'s tiles come by tl.load "
                                     f"on pointers; load them with {load}")
    stage = smem.gemm_stage_bytes(*CODE_TILE)
    c_tile = CODE_TILE[0] * CODE_TILE[1] * 2 if compiled.counts()["cp.async.bulk.tensor store"] else 0
    ring = compiled.shared - c_tile  # a TMA-store epilogue stages the C tile in shared memory too
    where = f" ({c_tile // 1024} KiB of it the C tile of the TMA store)" if c_tile else ""
    if ring < 2 * stage:
        raise AssertionError(f"the kernel asks {compiled.shared // 1024} KiB of shared memory at {CODE_STAGES} stages"
                             f"{where}: {ring // 1024} KiB for A and B tiles, less than two {stage // 1024} KiB stages: "
                             "the loads are not pipelined; keep the K loop a plain loop over descriptor loads feeding "
                             "tl.dot (num_stages=1 on it keeps one buffer)")
    return (f"{compiled.shared // 1024} KiB of shared memory at {CODE_STAGES} stages{where}: {ring // 1024} KiB left, "
            f"at least two {stage // 1024} KiB stages of A and B tiles: the ring is there")


def _epilogue(kernel):
    compiled = lab_check.require_kept_dot(compile_sm90(kernel, *CODE_TILE, CODE_STAGES), kernel)
    counts, problems = compiled.counts(sass=False), []
    if not counts["cp.async.bulk.tensor store"]:
        problems.append(f"no cp.async.bulk.tensor store but {counts['st.global']} x st.global: the C tile leaves "
                        "through pointers; store it with c_desc.store(...), which also clips the edge tiles")
    unmasked = [line for line in compiled.ptx.splitlines() if "ld.global" in line and not line.lstrip().startswith("@")]
    if unmasked:
        problems.append(f"{len(unmasked)} ld.global without a predicate: the bias load has no mask, so the last "
                        "column tile reads past the end of bias; mask it (columns < N), or load it through a "
                        "1D descriptor, which fills past the edge with zeros")
    accumulators = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.\w+\.(\w+)\.\w+\.\w+", compiled.ptx))
    if accumulators - {"f32"}:
        problems.append(f"wgmma accumulates in {', '.join(sorted(accumulators))}: keep an fp32 accumulator "
                        "(tl.zeros(..., dtype=tl.float32)) and convert when storing")
    if problems:
        raise AssertionError("; ".join(problems))
    loads = len([line for line in compiled.ptx.splitlines() if "ld.global" in line])
    bias = f"{loads} predicated ld.global (the bias, masked)" if loads else "no ld.global (the bias comes by TMA too)"
    return f"{counts['cp.async.bulk.tensor store']} cp.async.bulk.tensor store, {bias}, wgmma accumulating in f32"


def check(matmul, kernel):
    """``matmul(a, b, bias, BLOCK_M, BLOCK_N, BLOCK_K, stages, programs=None, out=None)`` launches ``kernel``
    (gemm.matmul_kernel's arguments, then ``bias_ptr``) on ``programs`` programs into ``out``, computing
    C = relu(A @ B + bias); the programs must walk all the tiles."""
    return lab_check.run("exercise 04", [("persistent GEMM + epilogue: values", lambda: _values(matmul, kernel)),
                                         ("pipelined: the ring in the code", lambda: _ring(kernel)),
                                         ("epilogue in the code: TMA store, masked bias, fp32", lambda: _epilogue(kernel))], twin=True)


def _bias_by_tma(kernel, before):
    after, first = (compile_sm90(k, *CODE_TILE, CODE_STAGES) for k in (kernel, before))
    lab_check.require_kept_dot(after, kernel)
    loads = lambda c: len([line for line in c.ptx.splitlines() if "ld.global" in line])
    tma = lambda c: c.counts(sass=False)["cp.async.bulk.tensor load"]
    if loads(after):
        raise AssertionError(f"{loads(after)} ld.global left in the PTX: the bias still comes through a pointer; load "
                             "it through tl.make_tensor_descriptor(bias_ptr, [N], [1], [BLOCK_N])")
    return (f"ld.global {loads(first)} -> 0 and cp.async.bulk.tensor loads {tma(first)} -> {tma(after)} against your "
            "first kernel: the bias comes by TMA, and the columns past N are zeros from the hardware, not a mask")


def check_stretch(matmul, kernel, before):
    """The stretch goal: ``kernel`` (launched by ``matmul`` as in ``check``) loads the bias through a 1D
    descriptor; ``before`` is the first kernel, whose code it is compared with."""
    checks = [("persistent GEMM + epilogue: values", lambda: _values(matmul, kernel)),
              ("pipelined: the ring in the code", lambda: _ring(kernel)),
              ("epilogue in the code: TMA store, masked bias, fp32", lambda: _epilogue(kernel)),
              ("the bias through TMA", lambda: _bias_by_tma(kernel, before))]
    return lab_check.run("exercise 04, stretch", checks, twin=True)
