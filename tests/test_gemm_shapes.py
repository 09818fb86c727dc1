"""The kernels of lessons 07 and 08 on ragged shapes, in the mode this machine has: compiled on a GPU, in Triton's
interpreter without one (fp16 and e4m3; bf16 dots are wrong in the interpreter, triton-lang/triton#11584). Every
kind against torch, the output tile stored in halves,
the split last wave called twice (its counts must reset), a plan replayed after its inputs change, lesson 07's copy
paths and one-way kernels, and the messages for bad input."""
import itertools

import pytest
import torch

import kernels  # noqa: F401  (first: the interpreter)
from kernels.lab.errors import CourseError
from kernels.lab.mode import DEVICE, MODE
from kernels.ops import gemm, gemm_fp8

TILE = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, stages=2, num_warps=4)


def _operands(M, N, K):
    return (torch.randn(M, K, dtype=torch.float16, device=DEVICE),
            torch.randn(K, N, dtype=torch.float16, device=DEVICE))


def _nan(M, N):
    """An fp16 output poisoned with NaN, where the kernels run."""
    return torch.full((M, N), float("nan"), dtype=torch.float16, device=DEVICE)


def _err(c, a, b):
    ref = a.float() @ b.float()
    return ((c.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("M, N, K, programs", [(40, 72, 56, 3), (16, 96, 80, 7), (33, 32, 48, 2)])
def test_every_kind_matches_torch_on_ragged_shapes(M, N, K, programs):
    a, b = _operands(M, N, K)
    for name, run in (("persistent", lambda c: gemm.matmul_tma_host(a, b, **TILE, programs=programs, out=c)),
                      ("per tile", lambda c: gemm.matmul_tma_host(a, b, **TILE, persistent=False, out=c)),
                      ("split tail", lambda c: gemm.matmul_split_tail(a, b, **TILE, programs=programs, out=c))):
        c = _nan(M, N)
        run(c)
        assert not c.isnan().any() and _err(c, a, b) < 1e-2, name


def test_the_split_last_wave_resets_its_counts_between_calls():
    # 3 x 3 tiles on 4 programs: 8 whole, the last tile split 4 ways; a count left at 4 would never reach
    # SPLIT - 1 again and the second call's last tile would stay unwritten
    a, b = _operands(48, 96, 128)
    assert gemm.split_plan(48, 96, 128, 16, 32, 16, 4) == (8, 4)
    for _ in range(2):
        a.normal_()
        c = _nan(48, 96)
        gemm.matmul_split_tail(a, b, **TILE, programs=4, out=c)
        assert not c.isnan().any() and _err(c, a, b) < 1e-2


@pytest.mark.parametrize("M, N, K, sms", [(3072, 3072, 3072, 132), (1024, 1024, 1024, 132), (16, 4096, 4096, 132),
                                          (8192, 8192, 8192, 132), (128, 128, 64, 132), (300, 500, 70, 7)])
def test_split_plan_fills_the_idle_sms_and_no_more(M, N, K, sms):
    tiles, full, tail = gemm.waves(M, N, 128, 128, sms)
    whole, split = gemm.split_plan(M, N, K, 128, 128, 64, sms)
    assert whole % sms == 0 or whole == tiles
    assert (tiles - whole) * split <= sms and 1 <= split <= min(8, -(-K // 64))
    assert split == 1 or whole == full * sms


def test_a_plan_replays_the_same_tensors_with_their_new_values():
    a, b = _operands(40, 64, 48)
    c = torch.empty(40, 64, dtype=torch.float16, device=DEVICE)
    for name, cfg in (("gemm_tma_host", TILE), ("gemm_split_tail", dict(TILE, programs=3))):
        plan = gemm.plan(name, a, b, c, **cfg)
        for _ in range(2):
            a.normal_()
            c.fill_(float("nan"))
            plan()
            assert _err(c, a, b) < 1e-2, name
        # on a GPU the plan goes straight to the compiled launcher; the interpreter has none to go to
        assert plan.fast if MODE != "cpu" else "interpreter" in plan.why_slow, (name, plan.why_slow)


def test_bad_operands_get_the_course_message():
    a, b = _operands(40, 64, 48)
    with pytest.raises(CourseError, match=r"out has shape \(3, 3\) but the product is \(40, 64\)"):
        gemm.plan("gemm_tma_host", a, b, torch.empty(3, 3, dtype=torch.float16, device=DEVICE), **TILE)
    with pytest.raises(CourseError, match="16-byte aligned base"):
        gemm.matmul_tma_host(a[:, 1:], b[1:], **TILE)  # a view one fp16 in: its base is 2 bytes off
    with pytest.raises(CourseError, match="needs \\(M, K\\) @ \\(K, N\\)"):
        gemm.matmul_split_tail(a, b.t(), **TILE)


def test_fp8_matches_its_reference_and_refuses_what_wgmma_cannot_read():
    a, sa = gemm_fp8.quantize(torch.randn(40, 64, device=DEVICE))
    bt, sb = gemm_fp8.quantize(torch.randn(56, 64, device=DEVICE))
    c = gemm_fp8.matmul_fp8(a, bt, sa, sb, out_dtype=torch.float16, BLOCK_M=16, BLOCK_N=32, BLOCK_K=32,
                            num_warps=4, programs=3)
    ref = gemm_fp8.reference(a, bt, sa, sb, torch.float16).float()
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2
    with pytest.raises(CourseError, match="pass B transposed"):
        gemm_fp8.matmul_fp8(a, bt.t().contiguous(), sa, sb)
    with pytest.raises(CourseError, match="quantize it first"):
        gemm_fp8.matmul_fp8(a.half(), bt, sa, sb)
    with pytest.raises(CourseError, match="one float32 value"):
        gemm_fp8.matmul_fp8(a, bt, torch.ones(2, device=DEVICE), sb)


@pytest.mark.parametrize("M, N, K", [(40, 72, 56), (33, 64, 48)])
def test_the_output_tile_stored_in_halves_matches_torch(M, N, K):
    a, b = _operands(M, N, K)
    for persistent in (True, False):
        c = _nan(M, N)
        gemm.matmul_tma_host(a, b, **TILE, persistent=persistent, subtile=True, programs=3, out=c)
        assert not c.isnan().any() and _err(c, a, b) < 1e-2, persistent
    a8, sa = gemm_fp8.quantize(torch.randn(M, 64, device=DEVICE))
    bt, sb = gemm_fp8.quantize(torch.randn(N, 64, device=DEVICE))
    c = _nan(M, N)
    gemm_fp8.matmul_fp8(a8, bt, sa, sb, out=c, BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, programs=3,
                        subtile=True)
    ref = gemm_fp8.reference(a8, bt, sa, sb, torch.float16).float()
    assert not c.isnan().any() and ((c.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_the_search_stores_in_halves_where_the_whole_tile_does_not_fit():
    from kernels.lessons import l07_shapes_and_waves as l07, l08_fp8_capstone as l08
    halves = {(c["BLOCK_M"], c["BLOCK_N"], c["stages"]) for _, c in l07.space() if c.get("subtile")}
    assert (128, 256, 4) in halves and (128, 256, 3) in halves and (128, 128, 4) not in halves
    assert not any(c.get("subtile") for n, c in l07.space() if n == "gemm_split_tail")
    whole = {(c["BLOCK_M"], c["BLOCK_N"], c["stages"]) for _, c in l07.space() if not c.get("subtile")}
    assert (128, 256, 4) not in whole  # 256 KiB whole: it fits only in halves
    assert l07.config_of(128, 256, 4, "persistent")[1].get("subtile") is True
    assert any(c["stages"] == 4 and c["BLOCK_N"] == 256 and c.get("subtile") for c in l08.space())


# ---- lesson 07's copy study: each path, each side alone ----------------------------------------------

from kernels.ops import copy  # noqa: E402


@pytest.mark.parametrize("load, store", list(itertools.product(("tma", "pointer"), repeat=2)))
def test_the_copy_paths_copy_exactly_on_a_ragged_shape(load, store):
    x = torch.randn(70, 136, dtype=torch.float16, device=DEVICE)
    y = torch.full_like(x, float("nan"))
    copy.copy_paths(x, out=y, load=load, store=store, BLOCK_M=32, BLOCK_N=64, stages=2, programs=3,
                    evict_first=True, streaming_store=True)
    assert torch.equal(y, x)


def test_each_side_alone_reads_every_tile_and_writes_every_element():
    x = torch.randn(70, 136, dtype=torch.float16, device=DEVICE)
    sums = copy.read_tma(x, BLOCK_M=32, BLOCK_N=64, programs=3)
    assert sums.shape == (3,) and abs(sums.double().sum() - x.double().sum()) < 1e-2
    y = torch.full_like(x, float("nan"))
    copy.fill_tma(y, 1.5, BLOCK_M=32, BLOCK_N=64, programs=3)
    assert (y == 1.5).all()


def test_a_copy_path_that_is_neither_gets_the_course_message():
    x = torch.randn(64, 64, dtype=torch.float16, device=DEVICE)
    with pytest.raises(CourseError, match="load is 'tma' or 'pointer', got 'ptr'"):
        copy.copy_paths(x, load="ptr")
    with pytest.raises(CourseError, match="contiguous"):
        copy.copy_paths(x.t())
