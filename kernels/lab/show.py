"""Show things in a notebook: a kernel's source, highlighted; lines of its compiled code."""
import inspect

from IPython.display import Code


def source(obj):
    """Highlighted source of a function, a @triton.jit kernel, or a module."""
    fn = getattr(obj, "fn", obj)
    return Code(inspect.getsource(fn), language="python")


def code(text, language="text"):
    return Code(text, language=language)
