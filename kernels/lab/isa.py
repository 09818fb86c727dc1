"""Read compiled code: count instructions by family in PTX and SASS, show the lines that matter.

Counts are static: how many times an instruction appears in the code, not how often it runs.
A loop body appears once; multiply by the trip count to get work per tile."""
import re
from collections import Counter

_PTX_OP = re.compile(r"^\s*(?:@!?%p\w+\s+)?([a-z][\w.:]*)")
# cuobjdump writes "/*0090*/  LDG.E.128 ...;", Triton's get_sass "ctrl\tLDG.E.128 ...;"
_SASS_OP = re.compile(r"^\s*(?:/\*[0-9a-f]+\*/|[-\w:]+\t)\s*(?:@!?U?P\w+\s+)?([A-Z][\w.]*)[ ;]")
_BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
         "b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64}

# the families a lesson talks about, in the order they are shown
PTX_FAMILIES = ["ld.global", "st.global", "cp.async", "cp.async.bulk.tensor", "mbarrier", "wgmma", "mma.sync", "tcgen05"]
# QGMMA: wgmma on FP8; UTCHMMA, UTCBAR, LDTM, STTM: Blackwell's tcgen05 MMA, its commit to an mbarrier, and the
# loads and stores between tensor memory and registers (sm_100, compiled ahead of time only)
SASS_FAMILIES = ["LDG", "STG", "LDGSTS", "UTMALDG", "UTMASTG", "SYNCS", "HGMMA", "QGMMA", "HMMA", "UTCHMMA", "UTCBAR",
                 "LDTM", "STTM"]


def ptx_ops(ptx):
    for line in ptx.splitlines():
        m = _PTX_OP.match(line)
        if m and not line.lstrip().startswith(("//", ".")):
            yield m.group(1), line.strip()


def _width(op):
    parts = op.split(".")
    vec = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
    bits = next((_BITS[p] for p in reversed(parts) if p in _BITS), 0)
    return vec * bits


def count_ptx(ptx) -> Counter:
    """PTX counts: plain global loads/stores split by width in bits, cp.async (Ampere-style,
    LDGSTS), bulk tensor copies (TMA), mbarrier operations, wgmma and mma.sync."""
    c = Counter()
    for op, _ in ptx_ops(ptx):
        if op.startswith("ld.global"):
            c[f"ld.global {_width(op)}-bit"] += 1
            c["ld.global"] += 1
        elif op.startswith("st.global"):
            c[f"st.global {_width(op)}-bit"] += 1
            c["st.global"] += 1
        elif op.startswith("cp.async.bulk.tensor"):
            c["cp.async.bulk.tensor"] += 1
            c["cp.async.bulk.tensor load" if ".global.shared" not in op else "cp.async.bulk.tensor store"] += 1
        elif op.startswith("cp.async.bulk"):
            c["cp.async.bulk (other)"] += 1
        elif op.startswith(("cp.async.cg", "cp.async.ca")):
            c["cp.async"] += 1
        elif op.startswith("cp.async.commit_group") or op.startswith("cp.async.wait_group"):
            c[op.split(".")[0] + "." + op.split(".")[1] + "." + op.split(".")[2]] += 1
        elif op.startswith("mbarrier"):
            c["mbarrier"] += 1
        elif op.startswith("wgmma"):
            c["wgmma"] += 1
            if op.startswith("wgmma.mma_async"):
                c["wgmma.mma_async"] += 1
        elif op.startswith("mma.sync"):
            c["mma.sync"] += 1
        elif op.startswith("tcgen05"):  # Blackwell's MMA family: tcgen05.alloc, .mma, .commit, .ld, .wait, ...
            c["tcgen05"] += 1
            c["tcgen05 " + op.split(".")[1].split(":")[0]] += 1
        elif op.startswith(("ld.shared", "st.shared")):  # counted, shown only when asked for
            c[op[:9]] += 1
    return c


def count_sass(sass) -> Counter:
    """SASS counts: LDG/STG (by width), LDGSTS (cp.async), UTMALDG/UTMASTG (TMA), SYNCS
    (mbarrier hardware), HGMMA (wgmma), HMMA (mma.sync)."""
    c = Counter()
    for line in sass.splitlines():
        m = _SASS_OP.match(line)
        if not m:
            continue
        parts = m.group(1).split(".")
        base = parts[0]
        if base in ("LDG", "STG"):
            width = next((p for p in parts if p in ("64", "128", "U8", "S8", "U16", "S16")), "32")
            c[f"{base} {width}"] += 1
        if base in SASS_FAMILIES or base in ("LDS", "STS"):
            c[base] += 1
    return c


def opcodes(sass) -> Counter:
    """Every SASS instruction counted by its full mnemonic (``MUFU.EX2``) and by its opcode alone (``MUFU``)."""
    c = Counter()
    for line in sass.splitlines():
        m = _SASS_OP.match(line)
        if m:
            c[m.group(1)] += 1
            if "." in m.group(1):
                c[m.group(1).split(".")[0]] += 1
    return c


def lines(ptx, *prefixes, limit=6):
    """The first ``limit`` PTX lines whose opcode starts with one of ``prefixes``."""
    hits = [text for op, text in ptx_ops(ptx) if op.startswith(prefixes)]
    return hits[:limit]


def table(compiled, families=None):
    """A small text table: one row per instruction family (with its widths), one column per kernel."""
    compiled = list(compiled)
    rows = [comp.counts() for comp in compiled]
    if families is None:
        families = []
        for fam in PTX_FAMILIES + SASS_FAMILIES:
            if any(r[fam] for r in rows):
                families.append(fam)
                families += sorted({k for r in rows for k in r if k.startswith(fam + " ") and r[k]},
                                   key=lambda k: (int("".join(ch for ch in k.split()[-1] if ch.isdigit()) or 0), k))
    return layout([c.name for c in compiled], families, [[r[f] for r in rows] for f in families])


def layout(names, families, values):
    """The table's text: a label column wide enough for its longest label ("  cp.async.bulk.tensor store"), then
    one right-aligned column per name. A row that splits a family ("ld.global 128-bit") is indented under it
    when the family's own row is in the table."""
    labels = ["  " + f if " " in f and f.rsplit(" ", 1)[0] in families else f for f in families]
    label_width = max([24] + [len(label) + 2 for label in labels])
    width = max([12] + [len(n) for n in names]) + 2
    out = [f"{'instruction':{label_width}s}" + "".join(f"{n:>{width}s}" for n in names)]
    out += [f"{label:{label_width}s}" + "".join(f"{v:>{width}d}" for v in row) for label, row in zip(labels, values)]
    return "\n".join(out)


def outline(ptx, keep=("cp.async.commit_group", "cp.async.wait_group", "cp.async.bulk", "mbarrier", "wgmma.wait_group",
                       "bar.sync")):
    """The control skeleton of a kernel: loop labels, branches, and the synchronising instructions in
    ``keep``, with runs of the same data-moving instruction folded into one line ("cp.async x 12")."""
    out, run_op, run_n = [], None, 0

    def flush():
        nonlocal run_op, run_n
        if run_op:
            out.append(f"    {run_op} x {run_n}" if run_n > 1 else f"    {run_op}")
        run_op, run_n = None, 0

    for line in ptx.splitlines():
        text = line.strip()
        if text.startswith("$L__BB") and text.split()[0].endswith(":"):
            flush()
            out.append(text.split()[0] + ("   <- loop" if "Loop Header" in text else ""))
            continue
        m = _PTX_OP.match(line)
        if not m or text.startswith(("//", ".")):
            continue
        op = m.group(1)
        family = next((f for f in ("cp.async.cg", "cp.async.ca", "ld.global", "st.global", "wgmma.mma_async")
                       if op.startswith(f)), None)
        if family:
            if family != run_op:
                flush()
                run_op = family
            run_n += 1
        elif op.startswith(keep) or op == "bra" or op.startswith("bra."):
            flush()
            out.append("    " + " ".join(text.split()))
    flush()
    return "\n".join(out)


def resources(cubin):
    """{"REG": registers per thread, "STACK": bytes of stack frame, "LOCAL": bytes of local memory per thread
    (spills), "SHARED": static shared memory, ...} of a cubin's kernel, read by the cuobjdump Triton ships
    (``cuobjdump -res-usage``): what ptxas allotted, not an estimate."""
    import subprocess
    import tempfile

    from triton.tools.disasm import path_to_cuobjdump
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.check_output([path_to_cuobjdump(), "-res-usage", f.name], text=True)
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text)}
