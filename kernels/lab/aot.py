"""Compile a course kernel for sm_90 (Hopper) from any machine, with a real launch's specialisation.

A launch specialises on its arguments: pointers and integers divisible by 16 are marked
``tt.divisibility=16``, which is what lets the compiler emit 16-byte vector loads and cp.async.
Compiling from a hand-written signature without those marks shows code the GPU never runs, so
here the signature and marks come from Triton's own launch binder, fed with the real arguments.

Where the code comes from, by mode:
- hopper: ``kernel.warmup(...)``, the very kernel a launch with these arguments runs.
- gpu (no TMA): compiled in this process for ``GPUTarget("cuda", 90, 32)``.
- cpu: the interpreter patches ``triton.language`` in this process, so compiling here fails; a
  helper process without ``TRITON_INTERPRET`` compiles instead (``_aot_worker``), fed with a
  description of the arguments. Kernels defined in a notebook travel as source.
"""
import base64
import hashlib
import inspect
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch


from . import isa, triton_internals
from .mode import INTERPRET, MODE

SM90 = ("cuda", 90, 32)
SM100 = ("cuda", 100, 32)  # Blackwell (B200): compiled here, never run by the course (it has no such GPU)
_ARCH = {SM90: "sm_90", SM100: "sm_100"}
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Compiled:
    """A compiled kernel: its PTX, its cubin (SASS on demand), and what it asks of the chip."""
    name: str
    ptx: str
    cubin: bytes = field(repr=False)
    shared: int          # bytes of shared memory per block the kernel asks for
    num_warps: int
    num_stages: int
    origin: str          # where this code came from, said next to any evidence shown

    @cached_property
    def sass(self) -> str:
        from triton.tools.disasm import get_sass
        return get_sass(self.cubin)

    def counts(self, sass=True) -> dict:
        """Static instruction counts by family (PTX, and SASS unless sass=False)."""
        c = isa.count_ptx(self.ptx)
        if sass:
            c.update(isa.count_sass(self.sass))
        return c


def _from_kernel(ck, name, origin) -> Compiled:
    return Compiled(name=name, ptx=ck.asm["ptx"], cubin=ck.asm["cubin"], shared=ck.metadata.shared,
                    num_warps=ck.metadata.num_warps, num_stages=ck.metadata.num_stages, origin=origin)


def compile_here(fn, args, meta, target=SM90):
    """Compile ``fn`` (a JITFunction) for ``target`` exactly as a launch with ``args`` would."""
    return triton_internals.compile_as_launched(fn, args, meta, target)


def compile_sm90(kernel, *args, **meta) -> Compiled:
    """Compile ``kernel`` for sm_90 with these launch arguments (tensors, ints, constexprs,
    num_warps, num_stages) and return its code. Nothing is launched."""
    return compile_for(SM90, kernel, *args, **meta)


def compile_for(target, kernel, *args, **meta) -> Compiled:
    """``compile_sm90`` for ``target`` (``SM90`` or ``SM100``). On a Hopper GPU, sm_90 code is the launched kernel's;
    any other target is compiled ahead of time, in this process where Triton is not interpreted, else in the
    helper."""
    name, arch = kernel.fn.__name__, _ARCH[target]
    if not INTERPRET:
        try:  # Triton's own error, however deep, becomes the one CompileError every mode raises
            if MODE == "hopper" and target == SM90:
                return _from_kernel(kernel.warmup(*args, grid=(1,), **meta), name,
                                    f"the kernel this launch runs on {torch.cuda.get_device_name()}")
            return _from_kernel(compile_here(kernel, args, meta, target), name, f"compiled ahead of time for {arch}")
        except triton_internals.TritonVersionError:
            raise
        except Exception as e:
            raise CompileError(f"compiling {name} for {arch} failed: {short_error(e)}") from None
    reply = _worker().compile({**_request(kernel, args, meta), "target": list(target)})
    return Compiled(name=name, ptx=reply["ptx"], cubin=base64.b64decode(reply["cubin"]),
                    shared=reply["shared"], num_warps=reply["num_warps"],
                    num_stages=reply["num_stages"], origin=f"compiled ahead of time for {arch} (no GPU here)")


# ---- describing a launch to the helper process -------------------------------------------------

def describe_arg(a):
    from triton.tools.tensor_descriptor import TensorDescriptor
    if isinstance(a, torch.Tensor):
        return {"kind": "tensor", "dtype": str(a.dtype).removeprefix("torch."), "aligned": a.data_ptr() % 16 == 0}
    if isinstance(a, TensorDescriptor):
        return {"kind": "desc", "dtype": str(a.base.dtype).removeprefix("torch."), "shape": list(a.shape),
                "strides": list(a.strides), "block_shape": list(a.block_shape), "padding": a.padding}
    if a is None or isinstance(a, (bool, int, float, str)):
        return {"kind": "value", "v": a}
    raise TypeError(f"cannot describe a {type(a).__name__} argument for ahead-of-time compilation")


def _request(kernel, args, meta):
    py_fn = kernel.fn
    req = {"name": py_fn.__name__, "args": [describe_arg(a) for a in args], "meta": meta}
    module = sys.modules.get(py_fn.__module__)
    if py_fn.__module__.startswith("kernels.") and module is not None:  # importable in the helper process
        req["module"] = py_fn.__module__
        req["source_hash"] = hashlib.sha1(inspect.getsource(module).encode()).hexdigest()
    else:
        parts = [p for p in triton_internals.kernel_source(py_fn).values() if p]
        req["source"] = "import triton\nimport triton.language as tl\n\n" + "\n".join(
            p if not p.lstrip().startswith("def ") else "@triton.jit\n" + p for p in parts)
    return req


class _Worker:
    """One long-lived compile-only Python process (import cost paid once), spoken to in JSON lines."""

    def __init__(self):
        self.proc, self.owner = None, None
        self.lock = threading.Lock()
        self.cache = {}

    def _start(self):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["COURSE_AOT_WORKER"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.owner = os.getpid()
        self.proc = subprocess.Popen([sys.executable, "-m", "kernels.lab._aot_worker"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)

    def ensure(self):
        """Start the process unless it runs. poll() only where it was started: in a check's forked child
        (which borrows the parent's helper) it answers "exited"."""
        if self.proc is None or (os.getpid() == self.owner and self.proc.poll() is not None):
            self._start()

    def compile(self, req):
        key = json.dumps(req, sort_keys=True)
        with self.lock:
            if key not in self.cache:
                self.ensure()
                self.proc.stdin.write(key + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
                if not line:
                    self.proc = None
                    raise RuntimeError("the sm_90 compile helper process died; run the cell again")
                reply = json.loads(line)
                if "error" in reply:
                    arch = _ARCH.get(tuple(req.get("target", SM90)), "sm_90")
                    raise CompileError(f"compiling {req['name']} for {arch} failed: {reply['error']}")
                self.cache[key] = reply
            return self.cache[key]


class CompileError(RuntimeError):
    """Triton rejected the kernel or configuration; the message is Triton's own, shortened."""


def short_error(e, lines=12):
    """Triton's message without the deep trace: its type and its last lines (where the reason is)."""
    return "\n".join(f"{type(e).__name__}: {e}".strip().splitlines()[-lines:])


_WORKER = None


def start_worker():
    """Start the compile helper now if it is not running (before a check forks: see check.run)."""
    worker = _worker()
    with worker.lock:
        worker.ensure()


def forget_worker():
    """Drop the compile helper (a check's child process may have left it mid-reply); the next compile
    starts a new one."""
    global _WORKER
    if _WORKER is not None and _WORKER.proc is not None:
        _WORKER.proc.kill()
    _WORKER = None


def _worker():
    global _WORKER
    if _WORKER is None:
        _WORKER = _Worker()
    return _WORKER
