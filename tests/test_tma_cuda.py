"""Lesson 06's TMA copy and ring written by hand in CUDA (kernels/ops/tma_cuda.py): the protocol in the PTX and
SASS nvcc makes of it, each line beside Triton's for lesson 03's copy, the argument checks, the plans, and (with
a stand-in for the built extension, no GPU needed) what the launchers report."""
import shutil

import pytest
import torch

import kernels
from kernels.lab.errors import ArgumentError, CourseError, NoGPUError, SharedMemoryError, TMAError
from kernels.lab.mode import DEVICE
from kernels.ops import tma_cuda as tc

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="no nvcc on PATH: nothing to compile the CUDA with")

PROTOCOL = ["elect.sync", "mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "mbarrier.try_wait.parity.shared::cta.b64", "%globaltimer", "fence.proxy.async.shared::cta",
            "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", "cp.async.bulk.commit_group",
            "cp.async.bulk.wait_group.read 0"]


@pytest.fixture(scope="module")
def code():
    return tc.compiled()


@needs_nvcc
@pytest.mark.parametrize("name", tc.KERNEL_NAMES)
def test_each_kernel_speaks_the_whole_protocol_in_ptx_and_sass(code, name):
    ptx = code.kernel_ptx(name)
    for instruction in PROTOCOL:
        assert instruction in ptx, f"{name}: no {instruction} in its PTX"
    c = code.counts(name=name)
    assert c["UTMALDG"] >= 1 and c["UTMASTG"] == 1 and c["SYNCS"] >= 3, dict(c)
    assert "ld.global" not in c and "st.global" not in c  # the tile never passes through registers
    if name.startswith("tma_ring"):
        stages = int(name[-1])
        assert ptx.count("mbarrier.init") == stages  # one full barrier per slot (the init loop is unrolled)
        assert "cp.async.bulk.wait_group.read 1" in ptx  # a slot is refilled while this tile's store is in flight
        assert c["UTMALDG"] == 2  # the ring's fill and its refill


@needs_nvcc
@pytest.mark.parametrize("kind", ["copy", "ring"])
def test_side_by_side_finds_every_protocol_line_in_ours_and_in_tritons(code, kind):
    rows = tc.side_by_side(kind, ours_ptx=code.ptx)
    assert [r["step"] for r in rows] == [s["step"] for s in tc.PTX_MAP]
    for r, step in zip(rows, tc.PTX_MAP):
        assert r["ours"] and step["ours"] in r["ours"], r
        assert r["triton"] and step["triton"] in r["triton"], r
    text = tc.side_by_side_text(rows)
    assert "fence.mbarrier_init" in text and "tensor.2d.global.shared::cta.bulk_group" in text
    with pytest.raises(CourseError, match="'copy' or 'ring'"):
        tc.side_by_side("gemm", ours_ptx=code.ptx)


def _x(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("make, error, words", [
    (lambda: _x(64, 128, dtype=torch.float64), ArgumentError, "float16, bfloat16 and float32"),
    (lambda: _x(64, 128).to(torch.int32), ArgumentError, "float16, bfloat16 and float32"),
    (lambda: _x(2, 64, 128), ArgumentError, "2D tensors"),
    (lambda: _x(128, 64).t(), TMAError, "contiguous"),
    (lambda: _x(64, 1001), TMAError, "multiple of 16 bytes"),
    (lambda: _x(64, 1024)[:, 1:], TMAError, "16-byte"),
])
def test_launchers_refuse_what_tma_cannot_describe(make, error, words):
    for launcher in (tc.copy_tile, tc.ring):
        with pytest.raises(error, match=words):
            launcher(make())


def test_swizzle_box_and_out_are_checked():
    x = _x(128, 256)
    with pytest.raises(TMAError, match="at most 128 bytes .64 elements of float16.*box=.64, 64."):
        tc.ring(x, box=(64, 128), swizzle=True)
    with pytest.raises(TMAError, match="at least 8 rows"):
        tc.ring(x, box=(4, 64), swizzle=True)
    with pytest.raises(TMAError, match="box dim 1 is 100"):
        tc.copy_tile(x, box=(64, 100))
    with pytest.raises(ArgumentError, match="out has shape"):
        tc.copy_tile(x, out=_x(128, 128))
    with pytest.raises(ArgumentError, match="out is float32"):
        tc.ring(x, out=_x(128, 256, dtype=torch.float32))


def test_plans_count_tiles_grid_and_shared_memory():
    p = tc.plan_copy((1000, 1000), 2, (64, 128))
    assert (p.tiles, p.grid, p.tile_bytes) == (16 * 8, 16 * 8, 16384)
    p = tc.plan_ring((16384, 16384), 2, (64, 128), 2, None, 132)
    assert p.grid == 4 * 132 and p.smem == tc._ALIGN + 2 * 16384  # the default: 4 CTAs per SM
    assert tc.plan_ring((300, 520), 4, (64, 128), 2, None, 132).grid == 5 * 5  # no more CTAs than tiles
    assert tc.plan_ring((16384, 16384), 4, (64, 128), 2, None, 132).grid == 3 * 132  # fp32: 3 fit
    with pytest.raises(CourseError, match="at most 3 fit"):
        tc.plan_ring((16384, 16384), 4, (64, 128), 2, 4, 132)
    with pytest.raises(CourseError, match="stages=5"):
        tc.plan_ring((1024, 1024), 2, (64, 128), 5, 1, 132)
    with pytest.raises(SharedMemoryError, match="per block"):
        tc.plan_ring((1024, 1024), 4, (256, 256), 2, 1, 132)
    assert "box 64x128 (16 KiB), 2 slot(s)" in p.text()


@pytest.mark.skipif(kernels.MODE != "cpu", reason="a GPU builds the real extension (the test after the stand-in's)")
def test_building_needs_a_gpu():
    with pytest.raises(NoGPUError, match="needs a GPU"):
        tc.copy_tile(_x(64, 128))


class FakeExtension:
    """Stands in for the built extension: copies, and counts a timeout in every CTA whose barrier is armed for
    more bytes than one tile (what the GPU's bounded wait reports)."""

    def __init__(self, lose_tiles=False):
        self.lose_tiles = lose_tiles

    def copy_tile(self, x, y, box_m, box_n, swizzle, expect_bytes, budget_ns, smem_bytes, timeouts):
        ctas = tc.plan_copy(x.shape, x.element_size(), (box_m, box_n)).grid
        if expect_bytes > box_m * box_n * x.element_size():
            timeouts += ctas
        else:
            y.copy_(x)

    def ring(self, x, y, box_m, box_n, swizzle, stages, grid, budget_ns, smem_bytes, timeouts):
        if self.lose_tiles:
            timeouts += 3
        else:
            y.copy_(x)


@pytest.mark.skipif(kernels.MODE != "cpu", reason="a stand-in extension on CPU tensors; a Hopper GPU runs the real one "
                                                   "(the next test)")
def test_the_launchers_report_what_the_bounded_waits_saw(monkeypatch):
    fake = FakeExtension()
    monkeypatch.setattr(tc, "module", lambda: fake)
    x = _x(128, 256)
    assert torch.equal(tc.copy_tile(x), x) and torch.equal(tc.ring(x), x)
    bad = tc.wrong_count(x, 16384 + 16)
    assert not bad["completed"] and bad["timed_out"] == bad["ctas"] == 4
    assert bad["message"] == ("wrong_count: the barrier never completed: expected 16400 bytes, the copies deliver "
                              "16384 (4 of 4 CTAs gave up waiting)")
    good = tc.wrong_count(x, 16384)
    assert good["completed"] and "completed: expected = delivered = 16384 bytes in each of 4 CTAs" in good["message"]
    with pytest.raises(CourseError, match="raced .the wait returned before the tile had landed. or timed out"):
        tc.wrong_count(x, 8192)
    with pytest.raises(CourseError, match="64 or fewer"):
        tc.wrong_count(_x(1024, 1024), 16400)
    lossy = FakeExtension(lose_tiles=True)
    monkeypatch.setattr(tc, "module", lambda: lossy)
    with pytest.raises(tc.BarrierTimeout, match="ring: a barrier never completed within 1000 ms .3 of 4 CTAs"):
        tc.ring(x, ctas_per_sm=1)
    assert tc.timeouts(x) == 0  # the counter starts again at zero after a report


@pytest.mark.skipif(kernels.MODE != "hopper", reason="the real extension: TMA needs a Hopper GPU")
def test_on_hopper_the_real_copies_are_exact_and_a_wrong_count_times_out():
    x = _x(300, 520)  # ragged: the last boxes hang over both edges
    for dtype in tc.DTYPES:
        xd = x.to(dtype)
        assert torch.equal(tc.copy_tile(xd), xd) and torch.equal(tc.ring(xd, stages=3), xd), dtype
    bad = tc.wrong_count(x[:128, :256].contiguous(), 16384 + 16, budget_us=200)
    assert not bad["completed"] and bad["timed_out"] == bad["ctas"] == 4, bad
    assert tc.wrong_count(x[:128, :256].contiguous(), 16384)["completed"] and tc.timeouts(x) == 0
