"""CUDA C++ written by hand (lesson 06): compiled for sm_90a with ``nvcc`` and read as PTX and SASS on
any machine with the CUDA toolkit, built and launched through torch's ``cpp_extension`` on a GPU.

A lesson's CUDA comes in two parts: ``kernels``, plain CUDA (``<cuda.h>`` and inline PTX, no torch), which
``compile_sm90a`` turns into PTX and a cubin anywhere; and ``launchers``, the host code that builds tensor
maps and launches the kernels on torch tensors, which only ``build`` compiles (with the kernels), on a GPU."""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import isa
from .errors import CourseError, NoGPUError
from .mode import LIVE

ARCH = "sm_90a"  # wgmma, setmaxnreg and TMA multicast need the "a" (architecture-specific) target
CACHE = Path(os.environ.get("COURSE_CUDA_CACHE", Path(tempfile.gettempdir()) / "course-cuda"))


def nvcc():
    """Path of ``nvcc``: on PATH, or under CUDA_HOME / /usr/local/cuda; a clear message if absent."""
    for candidate in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise CourseError("nvcc not found: lesson 06 compiles CUDA C++ with the CUDA toolkit's nvcc (12.3 or newer for "
                      "sm_90a); install the toolkit and put its bin/ on PATH (see `make doctor`)")


def kernel_ptx(ptx, name):
    """The PTX of one kernel (``.entry name``) of a module's PTX."""
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:] if end < 0 else ptx[start:end]


@dataclass
class CudaCode:
    """Kernels compiled for sm_90a: the PTX nvcc wrote and the cubin ptxas made of it (SASS on demand)."""
    name: str
    ptx: str
    cubin: bytes

    @property
    def entries(self):
        """The kernels' (mangled) names, in the PTX's order."""
        return re.findall(r"^\.visible \.entry (\w+)\(", self.ptx, re.M)

    def kernel_ptx(self, name):
        """The PTX of one kernel (``.entry name``) of the module."""
        return kernel_ptx(self.ptx, name)

    def kernel_sass(self, name):
        """The SASS of one kernel: Triton's get_sass (it ships cuobjdump/nvdisasm) stops after the first
        function of a cubin, so each kernel is asked for by name."""
        from triton.tools.disasm import get_sass
        return get_sass(self.cubin, fun=name)

    @cached_property
    def sass(self):
        """SASS of every kernel of the module."""
        from triton.tools.disasm import get_sass
        return "".join(self.kernel_sass(fun) for fun in self.entries) or get_sass(self.cubin)

    def counts(self, sass=True, name=None):
        """PTX and SASS instruction counts (``isa``) of the module, or of its kernel ``name``."""
        c = isa.count_ptx(self.ptx if name is None else self.kernel_ptx(name))
        if sass:
            c.update(isa.count_sass(self.sass if name is None else self.kernel_sass(name)))
        return c


def _run(cmd, what):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise CourseError(f"{what} failed:\n" + (done.stderr or done.stdout).strip()[-3000:])


def compile_sm90a(name, kernels, flags=()):
    """PTX and cubin of ``kernels`` (plain CUDA source) for sm_90a, cached by content."""
    key = hashlib.sha256((kernels + " ".join(flags) + ARCH).encode()).hexdigest()[:16]
    folder = CACHE / f"{name}-{key}"
    ptx, cubin = folder / f"{name}.ptx", folder / f"{name}.cubin"
    if not cubin.exists():
        folder.mkdir(parents=True, exist_ok=True)
        src = folder / f"{name}.cu"
        src.write_text(kernels)
        base = [nvcc(), f"-arch={ARCH}", "-O3", "-std=c++17", "-lineinfo", *flags]
        _run([*base, "-ptx", str(src), "-o", str(ptx)], f"nvcc -ptx of {name}")
        _run([*base, "-cubin", str(src), "-o", str(cubin)], f"nvcc -cubin of {name}")
    return CudaCode(name, ptx.read_text(), cubin.read_bytes())


def build(name, kernels, launchers, functions, flags=()):
    """The Python module of ``kernels`` + ``launchers`` (torch.utils.cpp_extension.load_inline), with
    ``functions`` bound: GPU only. Built once per content; later calls load it from torch's cache."""
    if not LIVE:
        raise NoGPUError(f"{name}: building and launching CUDA needs a GPU; without one the lesson reads the "
                         "PTX and SASS nvcc compiles here")
    from torch.utils.cpp_extension import load_inline
    key = hashlib.sha256((kernels + launchers + " ".join(flags)).encode()).hexdigest()[:12]
    decls = "\n".join(f"{sig};" for sig in functions.values())
    return load_inline(name=f"{name}_{key}", cpp_sources=[decls], cuda_sources=[kernels + "\n" + launchers],
                       functions=list(functions), extra_cuda_cflags=[f"-arch={ARCH}", "-O3", "-std=c++17", *flags],
                       verbose=False)
