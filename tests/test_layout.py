"""The layout the README draws: one name per lesson, four rooms that import only downwards, and a
README whose layout section lists exactly the files there are."""
import ast
import re
from pathlib import Path

import pytest

from kernels.lessons import LESSONS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kernels"
ROOMS = ["tools", "pack", "lessons", "ops", "lab"]  # each may import only from itself and the rooms after it
NOT_LESSONS = {"interview_pack"}  # notebooks/ pages generated from the lessons, not lessons themselves


def test_each_lesson_has_one_name_everywhere():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if p.stem not in NOT_LESSONS)
    assert notebooks == [f"{n}_{m[4:]}" for n, m in sorted(LESSONS.items())]
    for stem in notebooks:
        module = f"l{stem}"
        assert (PACKAGE / "lessons" / f"{module}.py").exists(), module
        assert (PACKAGE / "lessons" / f"{module}_exercise.py").exists(), f"{module}_exercise"
        assert (ROOT / "solutions" / f"{stem}.ipynb").exists() and (ROOT / "exercises" / f"{stem}.ipynb").exists()


def _imports(path):
    """The kernels.* modules a file imports, resolved to absolute names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(filter(None, [base, node.module]))
            found += [name] if node.module else [f"{name}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [n for n in found if n == "kernels" or n.startswith("kernels.")]


@pytest.mark.parametrize("room", ROOMS)
def test_rooms_import_only_downwards(room):
    allowed = tuple(f"kernels.{r}" for r in ROOMS[ROOMS.index(room):])
    for path in sorted((PACKAGE / room).glob("*.py")):
        for name in _imports(path):
            assert name.startswith(allowed), f"{path.relative_to(ROOT)} imports {name}: {room} sits above it"


def test_readme_layout_lists_exactly_the_files():
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Layout"):]
    block = block[block.index("```"):][3:]
    block = block[:block.index("```")]
    named = set(re.findall(r"\b([\w]+\.py)\b", block))
    files = {p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert named == files, f"in the README only: {named - files}; in kernels/ only: {files - named}"
    for room in ROOMS:
        assert f"  {room}/" in block, room
