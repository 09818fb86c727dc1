"""Lesson 09's attention kernel (kernels/ops/attention.py), checked where the course runs (the interpreter in CPU
mode, the GPU live): against torch's SDPA in fp32 on fresh ragged shapes, the output poisoned first; bad input
named; its sm_90 code compiled ahead of time (TMA loads of K and V, wgmma, one TMA store)."""
import random

import pytest
import torch

import kernels  # noqa: F401  (first: the interpreter)
from kernels.lab.errors import CourseError
from kernels.lab.mode import DEVICE, INTERPRET, MODE
from kernels.lessons.l09_attention import reference  # SDPA in fp32, causal aligned at the ends
from kernels.ops import attention as att

SMALL = dict(BLOCK_M=64, BLOCK_N=32, num_warps=4)  # interpreter-sized tiles; the GPU runs the defaults too


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", att.HEAD_DIMS)
def test_attention_matches_sdpa_on_ragged_shapes(dtype, causal, head_dim):
    big = MODE != "cpu"
    if dtype == torch.bfloat16 and INTERPRET:
        q = torch.randn(1, 1, 8, head_dim, dtype=dtype, device=DEVICE)
        with pytest.raises(CourseError, match="triton-lang/triton#11584"):
            att.attention(q, q, q, causal=causal)
        return
    for _ in range(2):
        seq_q = random.randint(65, 1500 if big else 150)
        seq_k = random.choice([seq_q, random.randint(33, 1500 if big else 150)])
        B, H = random.randint(1, 3), random.randint(1, 3)
        q, k, v = (torch.randn(B, H, s, head_dim, dtype=dtype, device=DEVICE) for s in (seq_q, seq_k, seq_k))
        o = torch.full_like(q, float("nan"))
        att.attention(q, k, v, causal=causal, out=o, **({} if big else SMALL))
        ref = reference(q, k, v, causal)
        err = (o.float() - ref).abs().max().item()
        tol = 2e-2 if dtype == torch.bfloat16 else 4e-3  # P rounded to the input dtype before the second GEMM
        assert err < tol, f"{dtype} causal={causal} (B, H, seq_q, seq_k, D)={(B, H, seq_q, seq_k, head_dim)}: {err}"


def test_a_custom_scale_and_the_flop_count():
    q, k, v = (torch.randn(1, 1, 80, 64, dtype=torch.float16, device=DEVICE) for _ in range(3))
    o = att.attention(q, k, v, scale=0.3, **({} if MODE != "cpu" else SMALL))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.3)
    assert (o.float() - ref).abs().max().item() < 4e-3
    assert att.flops(2, 16, 4096, 4096, 128) == 4 * 2 * 16 * 4096 * 4096 * 128
    assert att.flops(2, 16, 4096, 4096, 128, causal=True) == att.flops(2, 16, 4096, 4096, 128) // 2


@pytest.mark.parametrize("splits", [2, 3, 8])
def test_split_kv_decode_matches_sdpa(splits):
    """The decode path: one query (and a few) a sequence, the keys split among programs and combined; a ragged
    seq_k, so the last split is short and its last tile masked; causal with one query is the same as none."""
    for seq_q in (1, 3):
        seq_k = random.randint(300, 3000 if MODE != "cpu" else 700)
        q = torch.randn(2, 3, seq_q, 64, dtype=torch.float16, device=DEVICE)
        k, v = (torch.randn(2, 3, seq_k, 64, dtype=torch.float16, device=DEVICE) for _ in range(2))
        o = torch.full_like(q, float("nan"))
        att.attention(q, k, v, causal=seq_q == 1, splits=splits, out=o, **({} if MODE != "cpu" else
                                                                            dict(att.DECODE, BLOCK_N=64)))
        err = (o.float() - reference(q, k, v, False)).abs().max().item()
        assert err < 4e-3, f"splits={splits} seq_q={seq_q} seq_k={seq_k}: {err}"


def test_decode_is_chosen_by_itself():
    """One query, no tiles given: the decode tile and decode_splits' splits, matching SDPA; causal with one query is
    the same; two queries against a few keys, causal, stay on the prefill path."""
    seq_k = random.randint(900, 3000 if MODE != "cpu" else 1200)
    q = torch.randn(1, 2, 1, 64, dtype=torch.float16, device=DEVICE)
    k, v = (torch.randn(1, 2, seq_k, 64, dtype=torch.float16, device=DEVICE) for _ in range(2))
    for causal in (False, True):
        o = att.attention(q, k, v, causal=causal)
        assert (o.float() - reference(q, k, v, False)).abs().max().item() < 4e-3
    q2 = torch.randn(1, 2, 2, 64, dtype=torch.float16, device=DEVICE)
    k2, v2 = k[:, :, :40].contiguous(), v[:, :, :40].contiguous()
    o = att.attention(q2, k2, v2, causal=True, **({} if MODE != "cpu" else SMALL))
    assert (o.float() - reference(q2, k2, v2, True)).abs().max().item() < 4e-3


def test_decode_splits_fill_one_wave():
    assert att.decode_splits(32, 16384, 132) == 4        # 128 programs
    assert att.decode_splits(128, 16384, 132) == 1       # a wave already
    assert att.decode_splits(1, 2048, 132) == 4          # 4 tiles of 128 keys a split at least
    assert att.decode_splits(1, 100, 132) == 1


@pytest.mark.parametrize("bad, words", [
    (lambda q: dict(q=q, k=q, v=q, scale=-1.0), "scale -1.0; it must be positive"),
    (lambda q: dict(q=q, k=q, v=q, causal=True, splits=2), "split-KV is the decode path"),
    (lambda q: dict(q=q, k=q, v=q, splits=0), "split-KV is the decode path"),
    (lambda q: dict(q=q, k=q[:, :, :0], v=q[:, :, :0]), "seq_k 0: both must be at least 1"),
    (lambda q: dict(q=q.float(), k=q.float(), v=q.float()), "float16 or bfloat16"),
    (lambda q: dict(q=q, k=q.to(torch.bfloat16), v=q), "the same for all three"),
    (lambda q: dict(q=q[..., :32].contiguous(), k=q[..., :32].contiguous(), v=q[..., :32].contiguous()),
     r"head_dim 32; this kernel is built for \(64, 128\)"),
    (lambda q: dict(q=q, k=q[:, :1].contiguous(), v=q[:, :1].contiguous()), "batch, heads and head_dim"),
    (lambda q: dict(q=q[0], k=q[0], v=q[0]), r"\(batch, heads, seq, head_dim\)"),
    (lambda q: dict(q=q.transpose(1, 2), k=q, v=q), "contiguous"),
])
def test_bad_input_is_named(bad, words):
    q = torch.randn(2, 2, 16, 64, dtype=torch.float16, device=DEVICE)
    with pytest.raises(CourseError, match=words):
        att.attention(**bad(q))


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_sm90_code_streams_k_and_v_through_tma_into_wgmma(stages):
    """Compiled ahead of time at lesson 09's shape: Q's tile one TMA load; K and V one each per stage in each of the
    two loops (the unmasked tiles, then the masked ones; the pipeliner's prologue and the loop: static counts);
    both GEMMs on wgmma; O leaves by one TMA store; the ring costs shared memory by the stage."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from kernels.lab import aot
    B, H, S, D = 4, 16, 4096, 128
    descs = [TensorDescriptor.from_tensor(torch.empty(B * H, S, D, dtype=torch.float16, device=DEVICE), [1, blk, D])
             for blk in (128, 64, 64, 128)]
    code = aot.compile_sm90(att.attention_kernel, *descs, S, S, 0.1275, BLOCK_M=128, BLOCK_N=64, HEAD_DIM=D,
                            CAUSAL=False, stages=stages, num_warps=8)
    n = code.counts()
    assert n["UTMALDG"] == 1 + 2 * 2 * stages and n["UTMASTG"] == 1 and n["HGMMA"] > 0  # two loops, K and V each
    assert code.shared >= stages * 2 * 64 * D * 2  # a K tile and a V tile (64 x 128 fp16) per stage


def test_a_ring_that_does_not_fit_is_refused_with_the_budget():
    """What a launch out of shared memory says (Triton's OutOfResources, as a GPU raises it): the compiled figure,
    the limit, and the model, Q's tile plus a K and a V tile per stage."""
    from triton.runtime.errors import OutOfResources

    from kernels.lab.errors import SharedMemoryError
    e = att.overflow(OutOfResources(262_208, 232_448, "shared memory"), 128, 128, 128, 3)
    assert isinstance(e, SharedMemoryError)
    assert str(e) == ("attention 128x128, head_dim 128, with 3 stages does not fit: 256.1 KiB of shared memory asked, "
                      "227.0 KiB per block on this GPU (model: 3 x 64.0 KiB + 32.0 KiB output tile = 224.0 KiB) - use "
                      "fewer stages or a smaller tile")


def test_the_bytes_a_query_block_moves_fused_and_not():
    """128 queries against 4096 keys, head_dim 128, fp16: Q and O 32 KiB each, K and V 1 MiB each; unfused, S and P
    (1 MiB each) go out and come back."""
    fused = att.bytes_per_query_block(128, 4096, 128)
    assert fused == 2 * 32 * 1024 + 2 * 1024 * 1024
    assert att.bytes_per_query_block(128, 4096, 128, fused=False) == fused + 4 * 1024 * 1024
