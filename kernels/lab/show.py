"""Show things in a notebook: a kernel's source, highlighted; lines of its compiled code."""
import inspect

from IPython.display import Code


def source(obj):
    """Highlighted source of a function, a @triton.jit kernel, or a module."""
    fn = getattr(obj, "fn", obj)
    return Code(inspect.getsource(fn), language="python")


def code(text, language="text"):
    return Code(text, language=language)


# a cell expression whose value is a listing or a figure: shown only when it is the cell's last expression
SHOWN_BY_VALUE = ("show.source", "show.code", "findings.show", "plots.show", "swizzle.draw")


def dropped(cell_source):
    """The calls in one code cell whose value Jupyter throws away: a ``SHOWN_BY_VALUE`` call standing as an
    expression statement that is not the cell's last statement (Jupyter displays only the last one's value)."""
    import ast
    try:
        body = ast.parse(cell_source).body
    except SyntaxError:  # IPython magics: not the course's style, nothing to check
        return []
    return [ast.unparse(s.value).split("(")[0] for s in body[:-1]
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
            and ast.unparse(s.value.func).endswith(SHOWN_BY_VALUE)]


def unseen(notebook):
    """Problems of a notebook (its JSON, as a dict) a reader would meet: a cell whose figure shows only as its
    ``<Figure size ...>`` text (made off pyplot and left as the cell's value, not displayed), or a listing or
    figure call whose value the cell drops (``dropped``). ["cell N: ..."], empty when all is seen."""
    problems = []
    for n, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        problems += [f"cell {n}: the value of {call}(...) is dropped (not the last expression): display() it"
                     for call in dropped(src)]
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            plain = "".join(data.get("text/plain", ""))
            if plain.startswith("<Figure size") and "image/png" not in data:
                problems.append(f"cell {n}: a figure shows only as {plain.strip()!r}: display it (plots.show)")
    return problems
