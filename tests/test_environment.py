"""environment.yml (GPU box) and requirements.txt (CPU, CI) must list the same packages at the same
versions; the one deliberate difference is torch's build (2.13.0 CPU here, 2.11.0 + CUDA there)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DELIBERATE = {"torch": ("2.13.0", "2.11.0")}


def pins(text):
    return dict(re.findall(r"^[\s-]*([A-Za-z0-9_.-]+)==([^\s#]+)", text, re.M))


def test_environment_and_requirements_agree():
    req = pins((ROOT / "requirements.txt").read_text())
    env = pins((ROOT / "environment.yml").read_text())
    assert set(req) == set(env), f"only in requirements: {set(req) - set(env)}; only in environment.yml: {set(env) - set(req)}"
    for name in req:
        if name in DELIBERATE:
            assert (req[name], env[name]) == DELIBERATE[name], f"{name}: {req[name]} vs {env[name]}"
        else:
            assert req[name] == env[name], f"{name}: requirements {req[name]}, environment.yml {env[name]}"
    assert "python=3.12" in (ROOT / "environment.yml").read_text()
