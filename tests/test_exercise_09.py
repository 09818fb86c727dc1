"""Exercise 09's check, fed the wrong answers learners write: each must say what kind of wrong it is. The kernel: the
online-softmax update inside attention's K/V loop (running maximum, weights, rescaled sum and accumulator, P V)."""
import importlib.util
import sys

import pytest

import kernels  # noqa: F401  (first: the interpreter)
from conftest import report
from kernels.lessons import l09_attention_exercise as ex09

FRAME = '''
import torch, triton, triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def attention_kernel(q_desc, k_desc, v_desc, o_desc, seq_q, seq_k, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, stages: tl.constexpr):
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in tl.range(0, seq_k, BLOCK_N, num_stages=stages):
        k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        s = tl.dot(q, k.T) * qk_scale
        cols = start_n + tl.arange(0, BLOCK_N)
        s = tl.where(cols[None, :] < seq_k, s, float("-inf"))
UPDATE
    o_desc.store([bh, start_m, 0], (acc / l_i[:, None]).to(q.dtype).reshape(1, BLOCK_M, HEAD_DIM))


def attend(q, k, v, BLOCK_M, BLOCK_N, stages=1, num_warps=4, out=None):
    B, H, seq_q, D = q.shape
    o = torch.empty_like(q) if out is None else out
    descs = [TensorDescriptor.from_tensor(t.view(B * H, t.shape[2], D), [1, block, D])
             for t, block in ((q, BLOCK_M), (k, BLOCK_N), (v, BLOCK_N), (o, BLOCK_M))]
    attention_kernel[(triton.cdiv(seq_q, BLOCK_M), B * H)](*descs, seq_q, k.shape[2], 1.4426950408889634 / D ** 0.5,
                                                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=D, stages=stages,
                                                           num_warps=num_warps)
    return o
'''
RIGHT = """\
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new"""


def _module(update, tmp_path, name):
    """The exercise's cell with ``update`` as the learner's lines, imported from a file (Triton reads its source)."""
    path = tmp_path / f"{name}.py"
    path.write_text(FRAME.replace("UPDATE", update))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _check(update, tmp_path, name="learner"):
    mod = _module(update, tmp_path, name)
    return report(ex09.check, mod.attend, mod.attention_kernel)


def test_the_solution_passes(tmp_path):
    passed, text = _check(RIGHT, tmp_path)
    assert passed, text
    assert "with P in registers" in text and "scores past 128" in text


def test_the_stub_is_not_attempted(tmp_path):
    passed, text = _check("        # YOUR CODE HERE\n        raise NotImplementedError()", tmp_path)
    assert not passed and "exercise 09: not attempted yet" in text, text


WRONG = [
    ("        acc = acc * alpha[:, None]\n", "", "accumulator is not rescaled"),
    ("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)", "running sum l_i is not rescaled"),
    ("alpha = tl.math.exp2(m_i - m_new)", "alpha = tl.math.exp2(m_new - m_i)", "inverted"),
    ("        m_i = m_new", "", "never updated"),
    ("p = tl.math.exp2(s - m_new[:, None])", "p = tl.exp(s - m_new[:, None])", "exp, alpha exp2"),
    ("tl.math.exp2", "tl.exp", "exp in place of exp2"),
    ("tl.max(s, 1)", "tl.max(s, 0)", "axis 1"),
    ("tl.sum(p, 1)", "tl.sum(p, 0)", "axis 1"),
    ("p.to(v.dtype)", "p", "convert P to V's dtype"),
    ("p = tl.math.exp2(s - m_new[:, None])", "p = tl.math.exp2(s)", "not shifted by the running maximum"),
    ("m_new = tl.maximum(m_i, tl.max(s, 1))", "m_new = tl.max(s, 1)", "never falls"),
    ("""        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)""", """        l_i = (l_i + tl.sum(p, 1)) * alpha
        acc = tl.dot(p.to(v.dtype), v, acc)
        acc = acc * alpha[:, None]""", "applied after this tile is added"),
]


@pytest.mark.parametrize("old, new, words", WRONG, ids=[w[2] for w in WRONG])
def test_a_wrong_update_is_named(old, new, words, tmp_path):
    assert old in RIGHT
    passed, text = _check(RIGHT.replace(old, new), tmp_path, name=f"wrong_{abs(hash(words))}")
    assert not passed, text
    assert words in text, text
    assert "Traceback" not in text


def test_the_simulated_mistakes_differ_from_the_right_answer():
    """Every wrong answer the check names computes something else than the right one on the check's inputs (else
    naming it would be a guess)."""
    import random
    q, k, v = ex09._operands(40, 5 * 16 + 7, 12.0, random.Random(0))
    right = ex09.simulate(q, k, v, 16)
    for bug in ex09.WRONG:
        assert not ex09._same(right, ex09.simulate(q, k, v, 16, bug)), bug


@pytest.mark.parametrize("old, new, words", [
    ("p = tl.math.exp2(s - m_new[:, None])", "p = tl.math.exp2(s - m_i[:, None])", "shifted by the old maximum"),
    ("m_new = tl.maximum(m_i, tl.max(s, 1))\n        p = tl.math.exp2(s - m_new[:, None])",
     "s = s * qk_scale\n        m_new = tl.maximum(m_i, tl.max(s, 1))\n        p = tl.math.exp2(s - m_new[:, None])",
     "scaled twice"),
    ("        m_i = m_new", "", "never updated"),
    ("alpha = tl.math.exp2(m_i - m_new)", "alpha = tl.exp(m_i - m_new)", "alpha uses exp"),
], ids=["old max", "scaled twice", "max not moved on", "alpha base e"])
def test_the_frames_traps_are_named(old, new, words, tmp_path):
    """Mistakes the frame invites: the weights shifted by the maximum before this tile, the scale applied again (the
    lesson's _kv_tiles scales raw scores; the frame's s is scaled already), exp for alpha alone."""
    passed, text = _check(RIGHT.replace(old, new), tmp_path, name=f"trap_{abs(hash(words))}")
    assert not passed and words in text, text


def test_alpha_computed_after_the_maximum_moved_on_is_named(tmp_path):
    """alpha from m_i after m_i = m_new is 1: the sums are never rescaled, and the message says that is a way to get
    there."""
    moved = "        m_i = m_new\n        alpha = tl.math.exp2(m_i - m_new)\n        l_i = l_i * alpha"
    wrong = RIGHT.replace("        alpha = tl.math.exp2(m_i - m_new)\n", "").replace("        l_i = l_i * alpha", moved)
    passed, text = _check(wrong, tmp_path, name="alpha_after")
    assert not passed and "computed after m_i = m_new" in text, text
