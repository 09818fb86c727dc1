"""One module per lesson notebook, named like it (``l03_tma_descriptors`` is
``notebooks/03_tma_descriptors.ipynb``), each with its exercise check beside it
(``l03_tma_descriptors_exercise``, used by ``solutions/03_tma_descriptors.ipynb``)."""
import pkgutil

# "03" -> "l03_tma_descriptors", read from the files here: the tools find every lesson through it
LESSONS = {m.name[1:3]: m.name for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
           if m.name[:1] == "l" and m.name[1:3].isdigit() and not m.name.endswith("_exercise")}
