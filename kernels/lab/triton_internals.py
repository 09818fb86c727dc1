"""The few places where the course reaches inside Triton, all here, for one Triton version.

Compiling ahead of time with a real launch's specialisation (``tt.divisibility`` on pointers and
integers divisible by 16) needs Triton's own launch binder, which is not public API; so does
rebuilding a kernel defined in a notebook cell in another process. Written for Triton
``WRITTEN_FOR``; with another version, ``require()`` says so in one line instead of a deep
AttributeError."""
import inspect
import textwrap

import triton

WRITTEN_FOR = "3.6"


class TritonVersionError(RuntimeError):
    """Installed Triton differs from the one these internals were written for."""


def require():
    if not triton.__version__.startswith(WRITTEN_FOR + "."):
        raise TritonVersionError(
            f"kernels.lab.triton_internals was written for Triton {WRITTEN_FOR} (it uses "
            f"triton.runtime.jit.create_function_from_signature and JITFunction._pack_args to compile "
            f"ahead of time as a launch would); Triton {triton.__version__} is installed. Install "
            f"triton=={WRITTEN_FOR}.0 (requirements.txt), or port this module to the new binder.")


def compile_as_launched(fn, args, meta, target):
    """``triton.compile`` of JITFunction ``fn`` for ``target`` (a GPUTarget tuple), with the
    signature, constexprs and specialisation attributes a launch with ``args``/``meta`` gets."""
    require()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget(*target)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **meta)
    options, signature, constexprs, attrs = fn._pack_args(backend, meta, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def is_jit_function(value):
    return callable(getattr(value, "fn", None)) and hasattr(value, "run")


def kernel_source(py_fn, seen=None):
    """{name: source} of a kernel defined outside an importable module (a notebook cell), with the
    @triton.jit helpers and plain constants it refers to, found through the function's globals."""
    seen = {} if seen is None else seen
    for name in py_fn.__code__.co_names:
        val = py_fn.__globals__.get(name)
        if is_jit_function(val) and name not in seen:
            seen[name] = None
            kernel_source(val.fn, seen)
        elif isinstance(val, (bool, int, float)) and name not in seen:
            seen[name] = f"{name} = {val!r}\n"
        elif isinstance(val, triton.language.constexpr) and name not in seen:
            seen[name] = f"{name} = tl.constexpr({val.value!r})\n"
    seen[py_fn.__name__] = textwrap.dedent(inspect.getsource(py_fn))
    return seen


def interpret_float_arguments_as_fp32():
    """Make Triton's interpreter pass a Python float argument to a kernel as an fp32 scalar, as a compiled launch
    does (its signature type is fp32). Triton 3.6's interpreter passes the bare Python float, which its type rules
    treat as a literal: ``alpha * f`` of an fp16 tile stays fp16 there, where compiled for sm_90 the fp32 argument
    promotes it to fp32 (TTIR ``arith.mulf ... tensor<..xf32>``, checked here with Triton 3.6.0, 2026-12-02) - so
    an answer right on the GPU failed in CPU mode. Literals inside a kernel keep their rule in both."""
    require()
    import numpy as np
    from triton.runtime import interpreter

    if getattr(interpreter._implicit_cvt, "course_patched", False):
        return
    original = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if isinstance(arg, float):
            return triton.language.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32),
                                                                   triton.language.float32), triton.language.float32)
        return original(arg)
    implicit_cvt.course_patched = True
    interpreter._implicit_cvt = implicit_cvt


def interpret_loop_bounds_on_any_numpy():
    """Make Triton 3.6's interpreter take a runtime scalar (a one-element array there) as a loop bound on NumPy 2.4
    and later. It converts the scalar with ``int(array)``, which NumPy 2.4 refuses for an array of one dimension
    ("only 0-dimensional arrays can be converted to Python scalars"), so every ``for k in range(0, K, BLOCK_K)``
    failed in CPU mode there (NumPy 2.3.5 allowed it; the GPU image has 2.5.2). The element is read instead."""
    require()
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "course_patched", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    patch_lang_tensor.course_patched = True
    interpreter._patch_lang_tensor = patch_lang_tensor
