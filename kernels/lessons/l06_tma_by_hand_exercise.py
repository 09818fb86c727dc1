"""The check behind exercises/06_tma_by_hand.ipynb: the protocol of a 2-slot TMA ring written by hand in CUDA
(arm each slot's barrier with the bytes its load delivers, wait on that slot's barrier with the phase of this
round, bounded, flip the phase when the ring wraps, fence before the TMA store).

The learner's CUDA is checked four ways:
- compiled with nvcc for sm_90a (anywhere): a compile error comes back as the learner's line and nvcc's words;
- read in the PTX: expect_tx and its byte count, try_wait.parity, the parity flipping in the loop,
  fence.proxy.async before the bulk store, the bulk commit/wait;
- run on a model of the barriers (anywhere): the same source compiled for the CPU with the helpers replaced by
  a small model of an mbarrier (arrivals, a byte count, a phase) and of TMA (loads land later, in pieces),
  which says which wait returned too early, on which barrier, and what the store read;
- on a GPU: built with a launcher (kernels.lab.cuda.build), run on fresh random data into a poisoned output,
  every wait bounded, so a barrier that never completes is reported, never a hang; run in a process of its own,
  so a ring that stops the GPU does not take the notebook's CUDA context with it.
The helpers (``HELPERS``) are those of kernels/ops/tma_cuda.py, bounded wait included."""
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from ..lab import check as lab_check, cuda, isa
from ..lab.errors import CourseError
from ..lab.mode import LIVE, sm_count
from ..ops import tma_cuda

BOX = (64, 128)  # the tile, fp16
TILE_BYTES = BOX[0] * BOX[1] * 2
SLOT_STRIDE = 32768  # the slots' spacing in the exercise's kernel: room for an fp32 tile, twice an fp16 one
# 1 s per wait: far beyond an honest one, short enough that a wrong answer ends soon; wall-clock time, which runs on
# while the GPU serves other processes (a room sharing one card), so not much shorter (kernels/ops/tma_cuda.py)
BUDGET_NS = 1_000_000_000
KERNEL = "ring2"

# the helpers of tma_cuda.KERNELS (everything before its ring), closed: what the learner's kernel calls
_CUT = tma_cuda.KERNELS.index("// The ring:")
HELPERS = tma_cuda.KERNELS[:_CUT] + "}  // namespace tma\n"
# tma_cuda's host code up to its own launchers: the shared encoder (cuda.TENSOR_MAP_HOST), make_map, allow_smem
_HOST = tma_cuda.LAUNCHERS[:tma_cuda.LAUNCHERS.index("void copy_tile(")]
_LAUNCH = r"""
void run_ring2(torch::Tensor x, torch::Tensor y, int64_t grid, int64_t budget_ns, int64_t smem_bytes,
               torch::Tensor timeouts) {
  const c10::cuda::CUDAGuard guard(x.device());
  CUtensorMap in = make_map(x, 64, 128, false), out = make_map(y, 64, 128, false);
  const int tiles_m = (x.size(0) + 63) / 64, tiles_n = (x.size(1) + 127) / 128;
  allow_smem((const void*)ring2, smem_bytes);
  ring2<<<grid, 32, smem_bytes, c10::cuda::getCurrentCUDAStream()>>>(in, out, tiles_m, tiles_n, (uint64_t)budget_ns,
                                                                     timeouts.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
_SIGNATURE = ("void run_ring2(torch::Tensor x, torch::Tensor y, int64_t grid, int64_t budget_ns, int64_t smem_bytes, "
              "torch::Tensor timeouts)")
_BUILT = {}  # learner's source -> (the extension's file, its run_ring2's name)


def combined(sources):
    """(kernels, launchers, functions) of several answers in one extension, each in a namespace of its own, its
    kernel renamed ring2_<i> and its launcher run_ring2_<i>: one build (torch's headers compile once)."""
    kernels, launchers, functions = HELPERS, _HOST, {}
    for i, src in enumerate(sources):
        kernels += f"\n#define ring2 ring2_{i}\nnamespace answer{i} {{\n{src}\n}}\n#undef ring2\n"
        launchers += f"\n#define ring2 answer{i}::ring2_{i}\n#define run_ring2 run_ring2_{i}\n{_LAUNCH}#undef ring2\n#undef run_ring2\n"
        functions[f"run_ring2_{i}"] = _SIGNATURE.replace("run_ring2", f"run_ring2_{i}")
    return kernels, launchers, functions


def build(*sources):
    """Build the learners' sources (markers removed) for the GPU, all in one extension (GPU only): for each,
    (the extension's file, the name of its launcher), which ``gpu_run``'s child process loads."""
    todo = [s for s in dict.fromkeys(sources) if s not in _BUILT]
    if todo:
        module = cuda.build("ex06_ring2", *combined(todo))
        for i, src in enumerate(todo):
            _BUILT[src] = (module.__file__, f"run_ring2_{i}")
    return [_BUILT[s] for s in sources]


# The model: the helpers the learner calls, for the CPU. A barrier counts arrivals and bytes per phase; a TMA
# load lands later, 1 KiB at a time, only while somebody waits; every call is written to stdout as one line.
MODEL = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>
#define __global__
#define __device__
#define __forceinline__
#define __shared__
#define __grid_constant__
#define __launch_bounds__(...)
struct CUtensorMap { int id; };
struct Dim { unsigned x = 0, y = 0, z = 0; };
static Dim blockIdx, gridDim;
alignas(1024) uint8_t dynamic_smem[1];
static int atomicAdd(int* p, int v) { int old = *p; *p += v; return old; }

namespace tma {
struct Bar { int count = 0, pending = 0; long tx = 0; unsigned phase = 0; };
struct Load { uint32_t dst, bar; int x, y; long left; bool lost = false; };
static int lose = -1, issued = 0;  // the load (in issue order, per CTA) that never lands: a lost copy
static std::map<uint32_t, Bar> bars;
static std::vector<Load> flight;
static std::map<uint32_t, Load> slot;  // what each slot holds: the tile, and the bytes not landed yet
static const long CHUNK = 1024;

static void complete(uint32_t b) {
  Bar& r = bars[b];
  if (r.pending == 0 && r.tx == 0) { r.phase++; r.pending = r.count; printf("phase %u %u\n", b, r.phase); }
}
static bool known(uint32_t b, const char* what) {
  if (!bars.count(b)) { printf("nobar %s %u\n", what, b); return false; }
  return true;
}
inline uint32_t smem_u32(const void*) { return 0; }
inline uint32_t slots_base(const void*) { return 1024; }
inline bool elect_one() { return true; }
inline void mbar_init(uint32_t b, uint32_t count) {
  bars[b] = Bar{(int)count, (int)count, 0, 0}; printf("init %u %u\n", b, count);
}
inline void fence_mbarrier_init() { printf("fence_init\n"); }
inline void mbar_arrive_expect_tx(uint32_t b, uint32_t bytes) {
  printf("expect %u %u\n", b, bytes);
  if (!known(b, "expect")) return;
  bars[b].pending--; bars[b].tx += bytes; complete(b);
}
inline void tma_load_2d(uint32_t dst, const CUtensorMap*, int x, int y, uint32_t b) {
  printf("load %u %d %d %u\n", dst, x, y, b);
  Load l{dst, b, x, y, TILE_BYTES, issued++ == lose};
  flight.push_back(l); slot[dst] = l;
}
// land the loads that report to barrier b, a chunk at a time, until its phase of parity p completes
static bool land_until(uint32_t b, uint32_t p) {
  for (auto& l : flight) {
    if (l.bar != b || l.lost) continue;
    while (l.left > 0) {
      if ((bars[b].phase & 1u) != p) return true;
      l.left -= CHUNK; slot[l.dst].left = l.left; bars[b].tx -= CHUNK; complete(b);
    }
  }
  return (bars[b].phase & 1u) != p;
}
// polling is waiting too: a chunk lands per try; a try that succeeds is written as a wait that succeeded
inline bool mbar_try_wait(uint32_t b, uint32_t p) {
  if (!known(b, "wait")) return false;
  if ((bars[b].phase & 1u) != (p & 1u)) { printf("wait %u %u 1 1\n", b, p); return true; }
  for (auto& l : flight)
    if (l.bar == b && !l.lost && l.left > 0) {
      l.left -= CHUNK; slot[l.dst].left = l.left; bars[b].tx -= CHUNK; complete(b);
      break;
    }
  if ((bars[b].phase & 1u) == (p & 1u)) return false;
  printf("wait %u %u 0 1\n", b, p);
  return true;
}
inline uint64_t globaltimer() { return 0; }
inline bool mbar_wait_bounded(uint32_t b, uint32_t p, uint64_t) {
  if (!known(b, "wait")) return false;
  const bool at_once = (bars[b].phase & 1u) != (p & 1u);
  const bool ok = at_once || land_until(b, p & 1u);
  printf("wait %u %u %d %d\n", b, p, at_once ? 1 : 0, ok ? 1 : 0);
  return ok;
}
inline void fence_proxy_async() { printf("fence\n"); }
inline void tma_store_2d(const CUtensorMap*, int x, int y, uint32_t src) {
  auto it = slot.find(src);
  if (it == slot.end()) { printf("store %d %d %u -1 -1 %ld\n", x, y, src, TILE_BYTES); return; }
  printf("store %d %d %u %d %d %ld\n", x, y, src, it->second.x, it->second.y, it->second.left);
}
inline void bulk_commit() { printf("commit\n"); }
template <int N> inline void bulk_wait_read() { printf("wait_read %d\n", N); }
}  // namespace tma
"""

MODEL_MAIN = r"""
int main(int argc, char** argv) {
  const int tiles_m = atoi(argv[1]), tiles_n = atoi(argv[2]), grid = atoi(argv[3]);
  CUtensorMap in{0}, out{1};
  int timeouts = 0;
  gridDim.x = grid;
  if (argc > 4) tma::lose = atoi(argv[4]);
  for (unsigned b = 0; b < (unsigned)grid; ++b) {
    tma::bars.clear(); tma::flight.clear(); tma::slot.clear(); tma::issued = 0;
    blockIdx.x = b;
    printf("cta %u\n", b);
    ring2(in, out, tiles_m, tiles_n, 20000000ull, &timeouts);
    printf("end %d\n", timeouts);
  }
  return 0;
}
"""

STUB = "raise NotImplementedError()"


class CompileError(AssertionError):
    pass


def _source(cuda_src):
    """The learner's CUDA with the solution markers (a solution notebook's) removed; NotAttempted for the stub."""
    if STUB in cuda_src or "YOUR CODE HERE" in cuda_src:
        raise lab_check.NotAttempted("the CUDA still has 'YOUR CODE HERE' where the protocol goes")
    return "\n".join("" if "### " in line else line for line in cuda_src.splitlines())  # same line numbers


def _nvcc_says(text, offset, src):
    """nvcc's complaint, its first errors, with line numbers counted in the learner's CUDA."""
    lines = src.splitlines()
    out = []
    for m in re.finditer(r"\((\d+)\): (error|warning)[^:]*: (.*)", text):
        n = int(m.group(1)) - offset
        if m.group(2) != "error":
            continue
        where = f"line {n} of your CUDA (`{lines[n - 1].strip()}`)" if 0 < n <= len(lines) else "the course's helpers"
        out.append(f"{where}: {m.group(3).strip()}")
    if not out:  # ptxas or something else: its last lines
        out = [" / ".join(line.strip() for line in text.strip().splitlines()[-3:])]
    return "; ".join(out[:3])


def compile_ptx(cuda_src, stages=2):
    """(PTX of the learner's ring2 kernel, cleaned source): nvcc for sm_90a, CompileError in the learner's terms."""
    src = _source(cuda_src)
    full = HELPERS + src
    try:
        code = cuda.compile_sm90a(f"ex06_s{stages}", full, flags=(f"-DSTAGES={stages}",))
    except CourseError as e:
        if "nvcc not found" in str(e):
            raise
        raise CompileError("your CUDA does not compile for sm_90a: " + _nvcc_says(str(e), HELPERS.count("\n"), src)) \
            from None
    if KERNEL not in code.entries:
        raise AssertionError(f"no kernel named {KERNEL} in your CUDA (its entries: {', '.join(code.entries) or 'none'}): "
                             "keep the kernel's name and signature as given")
    return code.kernel_ptx(KERNEL), src


# ---- reading the PTX -----------------------------------------------------------------------------------------

def _defs(ptx):
    """register -> the instruction lines that write it (first operand)."""
    defs = {}
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)\s+(%\w+)\s*,(.*);", line)
        if m:
            defs.setdefault(m.group(2), []).append(line.strip().rstrip(";"))
    return defs


def expect_bytes(ptx):
    """The byte counts of every mbarrier.arrive.expect_tx, read from the PTX: an immediate operand, or the
    constant moved into its register; None for a count computed at run time."""
    defs, counts = _defs(ptx), []
    for m in re.finditer(r"mbarrier\.arrive\.expect_tx[\w.:]*\s+[^,]+,\s*\[[^\]]+\],\s*([^;]+);", ptx):
        op = m.group(1).strip()
        if re.fullmatch(r"\d+", op):
            counts.append(int(op))
            continue
        consts = {int(c) for line in defs.get(op, []) for c in re.findall(r"^mov\.\w+\s+%\w+,\s*(\d+);?$", line)}
        counts.append(consts.pop() if len(consts) == 1 and len(defs.get(op, [])) == 1 else None)
    return counts


def _name_count(n):
    if n == TILE_BYTES // 2:
        return f"{n} is half the tile"
    if n == 2 * TILE_BYTES:
        return f"{n} is the tile in fp32 (4 bytes an element; the tensors are fp16, 2 bytes) - or the slots' stride"
    if n == BOX[0] * BOX[1]:
        return f"{n} counts elements, not bytes"
    return f"{n} bytes is not what one load delivers"


def _bytes_problem(n):
    return (f"the barrier is armed with {n} bytes, but one TMA load of a {BOX[0]}x{BOX[1]} fp16 box delivers "
            f"{TILE_BYTES}: {_name_count(n)}. mbarrier.arrive.expect_tx must announce exactly the bytes the copy "
            f"reports to the barrier (64 x 128 x 2)")


def read_protocol(ptx):
    """Raise AssertionError naming the first missing or wrong protocol step in the PTX of ring2; a note when all
    are there."""
    ops = [op for op, _ in isa.ptx_ops(ptx)]
    first = lambda key: next((i for i, op in enumerate(ops) if op.startswith(key)), None)
    problems = []
    if first("mbarrier.arrive.expect_tx") is None:
        problems.append("no mbarrier.arrive.expect_tx: nothing arms the barriers, so each waits for an arrival that "
                        "never comes; before each load, mbar_arrive_expect_tx(the slot's barrier, the tile's bytes)")
    else:
        wrong = sorted({n for n in expect_bytes(ptx) if n is not None and n != TILE_BYTES})
        if wrong:
            problems.append(_bytes_problem(wrong[0]))
    waits = [i for i, op in enumerate(ops) if op.startswith("mbarrier.try_wait.parity")]
    if not waits:
        problems.append("no mbarrier.try_wait.parity: nothing waits for a load to land before its tile is stored; "
                        "wait with mbar_wait_bounded(the slot's barrier, phase, budget_ns)")
    elif not _parity_flips(ptx):
        problems.append("the parity the waits ask for never changes in the loop: the phase must flip (phase ^= 1) "
                        "each time the ring wraps, or the second round's waits ask for a phase that already completed")
    stores = [i for i, op in enumerate(ops) if op.startswith("cp.async.bulk.tensor") and ".global.shared" in op]
    fences = [i for i, op in enumerate(ops) if op.startswith("fence.proxy.async")]
    if waits and stores and not any(w < f < s for w in waits for f in fences for s in stores):
        problems.append("no fence.proxy.async between the wait and the TMA store: the store reads shared memory "
                        "through the async proxy; fence_proxy_async() after the wait orders the two views")
    if first("cp.async.bulk.commit_group") is None or first("cp.async.bulk.wait_group") is None:
        problems.append("the stores' bulk commit/wait is gone: keep bulk_commit() and bulk_wait_read<N>()")
    if problems:
        raise AssertionError("; ".join(problems))
    return (f"expect_tx {TILE_BYTES} bytes (= {BOX[0]} x {BOX[1]} x 2), try_wait.parity with a parity that flips in "
            "the loop, fence.proxy.async before the TMA store, bulk commit/wait")


def _parity_flips(ptx):
    """Whether the parity operand of a try_wait.parity can change: traced back through the registers it is
    moved from, it is not a constant (a never-flipped phase folds to one: the compiler sees it is always 0)."""
    defs = _defs(ptx)
    for m in re.finditer(r"mbarrier\.try_wait\.parity[\w.:]*\s+[^,]+,\s*\[[^\]]+\],\s*([^;]+);", ptx):
        seen, todo = set(), [m.group(1).strip()]
        while todo:
            reg = todo.pop()
            if not reg.startswith("%") or reg in seen:
                continue
            seen.add(reg)
            for line in defs.get(reg, [reg]):
                op, operands = line.split()[0], line.split(",", 1)[1] if "," in line else ""
                if not op.startswith("mov") or "%" not in operands and not re.search(r"\d", operands):
                    return True  # computed, a parameter or an unknown register: not a constant
                todo += re.findall(r"%\w+", operands)
    return False


# ---- the model: the same CUDA run on the CPU with model helpers -----------------------------------------------

MODEL_SECONDS = 5  # the model's run is over in well under a second: longer is a loop that never ends


def model_trace(src, stages, tiles_m, tiles_n, grid, lose=None):
    """The model's event lines for the learner's source (no markers) on a grid of ``grid`` CTAs; ``lose``: the
    load of each CTA (0 = its first) that never lands, as a lost copy or a wrong count would on the GPU."""
    head = f"#define STAGES {stages}\nstatic const long TILE_BYTES = {TILE_BYTES};\n" + MODEL
    text = head + src + MODEL_MAIN

    def make(tmp):
        (tmp / "model.cpp").write_text(text)
        done = subprocess.run(["g++", "-std=c++17", "-O0", "-w", "-o", str(tmp / "model"), str(tmp / "model.cpp")],
                              capture_output=True, text=True)
        if done.returncode:
            said = [f"line {int(n) - head.count(chr(10))} of your CUDA: {msg.strip()}"
                    for n, msg in re.findall(r"model\.cpp:(\d+):\d+: error: (.*)", done.stderr)]
            raise AssertionError("your kernel compiles with nvcc but not against the course's model of the barriers: "
                                 "call only the helpers given (mbar_arrive_expect_tx, mbar_wait_bounded, "
                                 "fence_proxy_async, ...), no inline PTX of your own. " + "; ".join(said[:2]))
    exe = cuda.built_once(cuda.CACHE / ("ex06-model-" + hashlib.sha256(text.encode()).hexdigest()[:16]),
                          ["model.cpp", "model"], make) / "model"
    argv = [str(exe), str(tiles_m), str(tiles_n), str(grid)] + ([str(lose)] if lose is not None else [])
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=MODEL_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"your kernel did not finish in the model ({MODEL_SECONDS} s)" +
                             (" with one load lost" if lose is not None else "") +
                             ": a wait that spins without a bound (mbar_wait_bounded gives up after budget_ns and "
                             "says so), or a loop whose end is never reached") from None
    return run.stdout.splitlines()


def diagnose(lines, tiles_m, tiles_n):
    """What the event lines say went wrong, in the learner's terms; None when every tile was stored whole from
    its own load, after a wait on its own slot's barrier, with a fence between."""
    owner, stored, last_wait, fenced, cta = {}, {}, None, False, 0
    for line in lines:
        f = line.split()
        kind = f[0]
        if kind == "cta":
            cta, owner, last_wait, fenced = int(f[1]), {}, None, False
        elif kind == "nobar":
            return (f"a {f[1]} uses shared-memory address {f[2]}, where no barrier was initialised: the barriers are "
                    "at full + 8 * s, one per slot s")
        elif kind == "expect":
            pass
        elif kind == "load":
            owner[int(f[1])] = int(f[4])  # slot -> the barrier its load reports to
        elif kind == "wait":
            last_wait, fenced = (int(f[1]), int(f[2]), f[3] == "1", f[4] == "1"), False
            if not last_wait[3]:
                slot = next((s for s, b in owner.items() if b == last_wait[0]), None)
                return (f"the barrier never completed: CTA {cta} waited on the barrier at {last_wait[0]} for the "
                        f"phase of parity {last_wait[1]} and every load reporting to it had landed; "
                        + ("its bytes never add up to what it was armed for (the expect_tx count)"
                           if slot is not None else "no load reports to that barrier") +
                        " (on the GPU the bounded wait gives up and says so)")
        elif kind == "fence":
            fenced = True
        elif kind == "store":
            x, y, src, tx, ty, left = int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6])
            tile = (y // BOX[0], x // BOX[1])
            if last_wait is None:
                return f"tile {tile} was stored without any wait before it: wait on its slot's barrier first"
            bar, parity, at_once, _ = last_wait
            if owner.get(src) is not None and bar != owner[src]:
                return (f"the wait before storing tile {tile} was on the barrier at {bar}, but the tile sits in the "
                        f"slot at {src}, whose load reports to the barrier at {owner[src]}: wait on the barrier of "
                        f"the slot you store from (full + 8 * slot)")
            if (tx, ty) != (x, y) or left > 0:
                what = ("the previous tile of that slot" if (tx, ty) != (x, y) and left <= 0 else
                        f"a tile of which {left} of {TILE_BYTES} bytes had not landed yet")
                why = (f"the wait asked for the phase of parity {parity}, which had already completed (a round "
                       "earlier), so it returned at once: the phase must flip each time the ring wraps"
                       if at_once else "the barrier's phase completed before the whole tile had landed: it was armed "
                       "with fewer bytes than the load delivers")
                return f"tile {tile} was stored from a slot holding {what}: {why}"
            if not fenced:
                return (f"tile {tile} was stored with no fence_proxy_async() between the wait and the TMA store: the "
                        "store reads shared memory through the async proxy, the fence orders it after the wait")
            if tile in stored:
                return f"tile {tile} was stored twice"
            stored[tile] = cta
            last_wait = None
    missing = [(m, n) for m in range(tiles_m) for n in range(tiles_n) if (m, n) not in stored]
    if missing:
        return f"{len(missing)} of {tiles_m * tiles_n} tiles were never stored (first: {missing[0]})"
    return None


def diagnose_lost(lines):
    """With one load lost, the wait for it must give up, and the kernel must count that and store nothing more:
    what the GPU run relies on to report a barrier that never completes instead of storing a half-landed tile."""
    gave_up, drained = False, False
    for line in lines:
        f = line.split()
        if f[0] == "wait" and f[4] == "0":
            gave_up = True
        elif f[0] == "wait_read" and gave_up:
            drained = f[1] == "0"
        elif f[0] == "store" and gave_up:
            tile = (int(f[2]) // BOX[0], int(f[1]) // BOX[1])
            return (f"when a wait gave up (a load that never lands), your kernel went on and stored tile {tile}: "
                    "use mbar_wait_bounded's result; on false, count the timeout (atomicAdd(timeouts, 1)) and "
                    "return")
        elif f[0] == "end" and gave_up:
            if int(f[1]) == 0:
                return ("a wait gave up (a load that never lands) and nothing counted it: on false, "
                        "atomicAdd(timeouts, 1), so the host can say that the barrier never completed")
            if int(f[1]) != 1:
                return (f"one wait gave up and the count says {f[1]}: count each wait that gives up once, "
                        "atomicAdd(timeouts, 1), so the host reports how many CTAs gave up")
            if not drained:
                return ("a wait gave up and the kernel left while the TMA stores it had issued may still read their "
                        "slots: before return, bulk_wait_read<0>() (the shared memory goes to the next CTA)")
            return None
    return None if gave_up else "with a load lost, no wait gave up: does each tile's wait go to its own slot's barrier?"


MODEL_CASES = ((3, 3, 2), (2, 3, 4), (1, 1, 1))  # (tiles_m, tiles_n, CTAs): rounds that wrap, a short CTA, one tile
MODEL_LOST = (3, 3, 1, 1)  # 9 tiles on one CTA, its second load lost


def model_check(src, stages=2):
    for tiles_m, tiles_n, grid in MODEL_CASES:
        wrong = diagnose(model_trace(src, stages, tiles_m, tiles_n, grid), tiles_m, tiles_n)
        if wrong:
            raise AssertionError(f"{tiles_m * tiles_n} tiles on {grid} CTA(s), {stages} slots: {wrong}")
    tiles_m, tiles_n, grid, lose = MODEL_LOST
    wrong = diagnose_lost(model_trace(src, stages, tiles_m, tiles_n, grid, lose=lose))
    if wrong:
        raise AssertionError(f"{tiles_m * tiles_n} tiles on {grid} CTA, {stages} slots, one load lost: {wrong}")
    return (f"{sum(m * n for m, n, _ in MODEL_CASES)} tiles on 1-4 CTAs: every wait on its own slot's barrier and "
            "phase, every tile stored whole after a fence; a lost load counted, nothing stored after it")


# ---- on the GPU -----------------------------------------------------------------------------------------------

# What a ring that stopped the GPU did. On the H200 (2026-12-02) the answer whose phase starts at 1 stopped it
# with "unspecified launch failure" 3 times in 26 runs; the other wrong answers of tests/test_exercise_06.py never
# did, in 60 runs each. Its waits return before their loads land, so the thread re-arms a barrier whose phase is
# still open and leaves while loads still write its shared memory (a hypothesis: which of the two traps is not
# measured). A fault of a CUDA context is sticky: every later kernel of that process fails too.
_CRASHED = ("your ring stopped the GPU ({}), in a process of its own: this notebook's GPU is unharmed. A ring whose "
            "waits return before their loads land can do this (on the H200 the answer whose phase starts at 1 did, now "
            "and then): the model's check above says which wait returned too early")


# a wait gives up after BUDGET_NS (1 s) and a CTA has about three tiles: a ring the GPU has not finished after 10 s
# has a wait that never gives up
HANG_S = 10
_HUNG = (f"your ring did not finish: the GPU had not done it after {HANG_S} s, where a copy takes milliseconds "
         "and every bounded wait gives up after 1 s - a wait that loops until its barrier completes, on a barrier that "
         "never does (a wrong byte count, or a phase that does not match)? Wait with mbar_wait_bounded and act on its "
         "result. It ran in a process of its own, now ended: this notebook's GPU is unharmed")


def _copies(run_ring2, rounds):
    """Copy fresh random fp16 tensors into poisoned outputs through ``run_ring2``, every wait bounded."""
    rng = lab_check.rng()
    for _ in range(rounds):
        M, N = BOX[0] * rng.randint(3, 40), BOX[1] * rng.randint(2, 20)
        x = lab_check.operand(M, N, dtype=torch.float16)
        y = lab_check.poisoned(M, N, dtype=torch.float16)
        tiles = (M // BOX[0]) * (N // BOX[1])
        grid = max(1, min(tiles // 3, 2 * sm_count(x)))  # about three tiles per CTA: the ring wraps
        timeouts = torch.zeros(1, dtype=torch.int32, device=x.device)
        run_ring2(x, y, grid, BUDGET_NS, 64 + 1023 + 2 * SLOT_STRIDE, timeouts)
        gave_up = int(timeouts.item())
        if gave_up:
            raise AssertionError(f"{M}x{N}: the barrier never completed: {gave_up} of {grid} CTAs gave up waiting "
                                 f"after {BUDGET_NS // 1_000_000} ms (their remaining tiles not stored); a wait "
                                 "that can never be satisfied - a wrong byte count, a wait on a barrier no load "
                                 "reports to, or a phase that does not match")
        lab_check.compare(f"{M}x{N} fp16 copy through your ring ({grid} CTAs)", y, x.double(), 0.0)
    return f"{rounds} random shapes copied exactly, every CTA finished"


def _child(path, name, rounds):
    """In the child process: load the built extension, copy, print the outcome as the last line (JSON)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem.split(".")[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def outcome():
        try:
            return ["pass", _copies(getattr(module, name), rounds)]
        except AssertionError as e:
            return ["fail", str(e)]
        except Exception as e:  # a CUDA error: the context is gone, and with it every later kernel of this process
            return ["crash", str(e).splitlines()[0] if str(e) else type(e).__name__]
    done, said = lab_check.finish_or_give_up(outcome, timeout=HANG_S)
    print("\n" + json.dumps(said if done else ["hang", ""]), flush=True)
    if not done:
        os._exit(0)  # the kernel still runs and would hold a normal exit; ending the process stops it


def gpu_run(src, rounds=3):
    """Build the learner's ring with the course's launcher (here, where the build is kept), then run it in a
    process of its own (``_copies``): a ring that stops the GPU takes that process's CUDA context with it, not
    the notebook's or the test worker's. A timeout is reported as such."""
    (path, name), = build(src)
    code = f"from kernels.lessons.l06_tma_by_hand_exercise import _child; _child({path!r}, {name!r}, {rounds})"
    try:  # the child starts torch in seconds and gives up on a ring after HANG_S: a minute is a last resort
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).resolve().parents[2])
        kind, note = json.loads(run.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        kind = "hang"
    except (IndexError, ValueError):
        kind, note = "crash", f"the process ended with code {run.returncode}: {run.stderr.strip()[-300:]}"
    if kind == "hang":
        raise AssertionError(_HUNG)
    if kind == "crash":
        raise AssertionError(_CRASHED.format(note))
    if kind == "fail":
        raise AssertionError(note)
    return note


def check(ring_cuda):
    """``ring_cuda``: the learner's CUDA (the ring2 kernel, calling the helpers of tma_cuda)."""
    def compiles():
        compile_ptx(ring_cuda)
        return "nvcc compiled your kernel for sm_90a"

    def after_compile(fn):  # each check may run in a child process of its own: nvcc's cache carries the work
        def run():
            try:
                ptx, src = compile_ptx(ring_cuda)
            except CompileError:
                raise AssertionError("not tried: your CUDA does not compile (above)") from None
            return fn(ptx, src)
        return run

    ptx = after_compile(lambda ptx, src: read_protocol(ptx))
    model = after_compile(lambda ptx, src: model_check(src))
    checks = [("your CUDA compiles (nvcc, sm_90a)", compiles), ("the protocol in the PTX", ptx),
              ("the protocol, tile by tile (a model of the barriers)", model)]
    if LIVE:
        checks.append(("on the GPU: values and termination", after_compile(lambda ptx, src: gpu_run(src))))
    passed = lab_check.run("exercise 06", checks)
    if not LIVE:
        print("(no GPU here: on one, the check also runs your ring on random data, every wait bounded)")
    return passed


def stretch(ring_cuda):
    """The optional stretch goal: the same CUDA with 3 and 4 slots (STAGES set by the compiler)."""
    def slots(n):
        def fn():
            compile_ptx(ring_cuda, stages=n)
            return model_check(_source(ring_cuda), stages=n)
        return fn
    return lab_check.run("stretch (optional)", [(f"{n} slots", slots(n)) for n in (3, 4)])
