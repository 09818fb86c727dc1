"""Lesson 06's swizzle and banks without a GPU: the patterns against hand-worked cases, the passes of known
warp accesses, the refusal of a box wider than the span, the picture, and the CUDA compiled and read (its
launchers' checks, and a simulation of the kernel on the layout the course predicts for TMA)."""
import shutil

import pytest
import torch
from matplotlib.figure import Figure

import kernels
from kernels.lab import swizzle
from kernels.lab.errors import ArgumentError, NoGPUError, TMAError
from kernels.lessons import l05_tilelang
from kernels.ops import banks_cuda

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="no nvcc on PATH: the CUDA is compiled with it")


# ---- the patterns --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0, 32, 64, 128])
def test_row_0_is_the_identity(mode):
    row = mode or 128
    assert swizzle.chunk_map(mode, 1, row)[0] == [(0, c) for c in range(row // 16)]


def test_128B_puts_chunk_c_of_row_r_at_c_xor_r_mod_8():
    assert swizzle.chunk_map(128, 16, 128) == [[(r, c ^ (r % 8)) for c in range(8)] for r in range(16)]
    assert swizzle.chunk_groups("CU_TENSOR_MAP_SWIZZLE_128B", 16, 128) == \
        [[c ^ (r % 8) for c in range(8)] for r in range(16)]
    assert swizzle.chunk_groups("none", 4, 128) == [list(range(8))] * 4


def test_64B_and_32B_key_on_the_128_byte_line():
    # 64-byte rows: two rows share a 128-byte line, so the key (two bits) moves every two rows
    assert swizzle.chunk_map("64B", 8, 64) == [[(r, c ^ ((r // 2) % 4)) for c in range(4)] for r in range(8)]
    # 32-byte rows: four rows a line, one key bit
    assert swizzle.chunk_map("32B", 16, 32) == [[(r, c ^ ((r // 4) % 2)) for c in range(2)] for r in range(16)]


@pytest.mark.parametrize("mode", [32, 64, 128])
def test_the_pattern_is_a_permutation_that_repeats(mode):
    block = swizzle.repeat(mode)
    assert block == 8 * mode
    moved = [swizzle.swizzled(a, mode) for a in range(0, 2 * block, 16)]
    assert sorted(moved) == list(range(0, 2 * block, 16))
    assert all(swizzle.swizzled(a + block, mode) == swizzle.swizzled(a, mode) + block for a in range(0, block, 16))
    assert all(swizzle.swizzled(a + 5, mode) % 16 == 5 for a in range(0, block, 16))  # bytes stay in their chunk


def test_banks_of_each_word():
    plain = swizzle.word_banks(0, 4, 128)
    assert plain == [list(range(32))] * 4
    sw = swizzle.word_banks(128, 2, 128)
    assert sw[1][:8] == [4, 5, 6, 7, 0, 1, 2, 3]  # row 1: chunks 0 and 1 swap places
    t = swizzle.tile(128, 8, 128)
    assert t.banks(3, 0) == (12, 13, 14, 15) and t.group(3, 0) == 3


def test_lesson_05_bank_groups_unchanged():
    assert l05_tilelang.bank_groups() == [[c ^ (r % 8) for c in range(8)] for r in range(8)]
    assert l05_tilelang.bank_groups(rows=8, swizzle=False) == [list(range(8))] * 8


# ---- passes of a warp's request ------------------------------------------------------------------------

def test_known_conflicts():
    stride_32_words = [t * 128 for t in range(32)]
    assert swizzle.ways(stride_32_words, 4) == 32 and swizzle.passes(stride_32_words, 4) == 32
    assert swizzle.passes([t * 4 for t in range(32)], 4) == 1          # consecutive words: one pass
    assert swizzle.passes([0] * 32, 4) == 1                             # one word for all: a broadcast
    assert swizzle.passes([t * 33 * 4 for t in range(32)], 4) == 1     # padded rows: conflict-free
    assert swizzle.passes([t * 16 for t in range(32)], 16) == 4         # 16-byte reads: 4 passes at best


@pytest.mark.parametrize("mode, width, passes, ways", [(0, 4, 32, 32), (0, 16, 32, 8), (128, 4, 4, 4),
                                                       (128, 16, 4, 1), (0, 8, 32, 16), (128, 8, 4, 2)])
def test_column_reads(mode, width, passes, ways):
    d = swizzle.column_read(mode, width)
    assert (d["passes"], d["ways"]) == (passes, ways)
    assert d["ideal"] == width * 32 // 128 or (width == 4 and d["ideal"] == 1)


def test_a_width_the_model_does_not_know():
    with pytest.raises(TMAError, match="4, 8 or 16 bytes"):
        swizzle.passes([0] * 32, 2)


# ---- the refusal ---------------------------------------------------------------------------------------

def test_a_box_wider_than_the_span_is_refused_with_the_reason():
    with pytest.raises(TMAError, match=r"256 bytes \(128 float16\) is wider than the 128-byte swizzle span.*"
                                       r"keyed \(2r \+ b // 128\) mod 8\), so a 16-byte column read would be "
                                       r"2-way conflicted.*at most 64 float16"):
        swizzle.check_box("128B", 256, "float16")
    with pytest.raises(TMAError, match="at most 16 float32.*or a wider swizzle"):
        swizzle.draw("64B", 8, 128, "float32")
    with pytest.raises(TMAError, match="multiples of 16 bytes"):
        swizzle.tile(0, 8, 24)
    with pytest.raises(TMAError, match="none, 32B, 64B and 128B"):
        swizzle.span("256B")
    swizzle.check_box(0, 512, "float16")  # no swizzle: only the box's 256 elements bound the row
    with pytest.raises(TMAError, match="at most 256 elements"):
        swizzle.check_box(0, 1024, "float16")


# ---- the picture ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, rows, row_bytes, dtype", [("128B", 8, 128, "float16"), ("64B", 16, 64, "bfloat16"),
                                                          ("32B", 32, 32, "float32"), ("none", 8, 256, "float16"),
                                                          (128, 4, 128, torch.float16)])
def test_draw_returns_a_figure(mode, rows, row_bytes, dtype):
    fig = swizzle.draw(mode, rows, row_bytes, dtype)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == (1 if swizzle.span(mode) == 0 else 2)
    if mode == "128B":
        assert "conflict-free" in fig.axes[1].get_title() and "8-way" in fig.axes[0].get_title()


# ---- the CUDA ------------------------------------------------------------------------------------------

@needs_nvcc
def test_the_kernels_compile_for_sm90a_with_tma_and_shared_loads(tmp_path, monkeypatch):
    from kernels.lab import cuda
    monkeypatch.setattr(cuda, "CACHE", tmp_path)
    code = banks_cuda.compiled()
    c = code.counts()
    assert len(code.entries) == 5
    assert c["cp.async.bulk.tensor load"] == 5 and c["UTMALDG"] == 5 and c["SYNCS"] >= 5
    assert "LDS.128 " in code.sass and c["LDS"] >= 5
    for name in code.entries:
        body = code.kernel_ptx(name)
        if "column_read" in name:
            swizzled = "Lb1E" in name
            assert ("xor.b32" in body) == swizzled, name  # the XOR is the only difference
            assert ("ld.shared.v4.b32" in body) == ("Li16E" in name), name


def _simulate(x, width, swizzled, iters):
    """What the kernel computes, in Python: each thread reads the shared-memory image the course predicts
    TMA writes, at the address the kernel computes."""
    mode = 128 if swizzled else 0
    out = []
    for b in range(x.shape[0] // 32):
        image = banks_cuda.predicted(x[32 * b:32 * b + 32], mode, 32, 64).contiguous().view(torch.int32).view(-1)
        words = [int(w) & 0xFFFFFFFF for w in image]
        for t in range(banks_cuda.THREADS):
            lane, warp, acc = t % 32, t // 32, 0
            for it in range(iters):
                col = (it + 5 * warp) % 32 if width == 4 else (it + warp) % 8
                off = swizzle.swizzled(lane * 128 + col * width, mode) // 4
                if width == 4:
                    acc += (col + 1) * words[off]
                else:
                    acc += (col + 1) * sum((i + 1) * words[off + i] for i in range(4))
            out.append(acc % 2 ** 32)
    return torch.tensor([(v + 2 ** 31) % 2 ** 32 - 2 ** 31 for v in out], dtype=torch.int32)


@pytest.mark.parametrize("width", [4, 16])
def test_reference_is_what_the_kernel_reads_from_the_predicted_layout(width):
    torch.manual_seed(width)
    x = torch.randn(64, 64, dtype=torch.float16)
    ref = banks_cuda.reference(x, width, 32)
    assert torch.equal(_simulate(x, width, True, 32), ref)
    assert torch.equal(_simulate(x, width, False, 32), ref)
    # reading the swizzled image at unswizzled addresses reads other columns: the check sees it
    image = banks_cuda.predicted(x[:32], 128, 32, 64)
    assert not torch.equal(banks_cuda.reference(image, width, 32), ref[:256])


def test_predicted_layout_moves_chunks():
    x = torch.arange(32 * 64, dtype=torch.int16).view(32, 64)
    image = banks_cuda.predicted(x, "128B", 32, 64)
    assert torch.equal(image[0], x[0])
    assert torch.equal(image[1, 8:16], x[1, 0:8]) and torch.equal(image[1, 0:8], x[1, 8:16])
    assert torch.equal(banks_cuda.predicted(x, 0, 8, 64), x[:8])


def test_launchers_check_their_arguments():
    x = torch.randn(64, 64, dtype=torch.float16, device=kernels.DEVICE)
    with pytest.raises(ArgumentError, match=r"\(32 k, 64\)"):
        banks_cuda.column_read(x[:, :32].contiguous())
    with pytest.raises(ArgumentError, match="4 or 16 bytes"):
        banks_cuda.column_read(x, width=8)
    with pytest.raises(ArgumentError, match="multiple of 32"):
        banks_cuda.column_read(x, iters=100)
    with pytest.raises(ArgumentError, match="16-bit elements"):
        banks_cuda.column_read(x.float())
    with pytest.raises(ArgumentError, match="out has shape"):
        banks_cuda.column_read(x, out=torch.empty(3, dtype=torch.int32, device=kernels.DEVICE))
    with pytest.raises(TMAError, match="at most 32 float16"):
        banks_cuda.tma_layout(x, "64B", 8, 64)
    with pytest.raises(ArgumentError, match="holds 8192"):
        banks_cuda.tma_layout(torch.randn(256, 64, dtype=torch.float16, device=kernels.DEVICE), 0, 128, 64)


@pytest.mark.skipif(kernels.MODE != "cpu", reason="CPU mode: the build is refused")
def test_without_a_gpu_the_launch_says_so():
    with pytest.raises(NoGPUError, match="needs a GPU"):
        banks_cuda.column_read(torch.randn(32, 64, dtype=torch.float16))


@pytest.mark.skipif(kernels.MODE != "hopper", reason="the real extension: TMA needs a Hopper GPU")
@pytest.mark.parametrize("width", [4, 16])
def test_on_hopper_every_read_matches_the_reference(width):
    x = banks_cuda.tile(4)
    for swizzled in (False, True):
        assert torch.equal(banks_cuda.column_read(x, width, swizzled, 64), banks_cuda.reference(x, width, 64)), swizzled
    banks_cuda.check_status(x.device)


def test_rows_narrower_than_the_span_are_not_drawn_from_the_address_rule():
    # the H200 laid out 128B-swizzled 64- and 32-byte rows, and 64B-swizzled 32-byte rows, differently from
    # the rule (gpu check of 2026-11-30); TMA accepts such boxes, the course's model refuses to draw them
    swizzle.check_box("128B", 64)
    for mode, row in (("128B", 64), ("128B", 32), ("64B", 32)):
        with pytest.raises(TMAError, match="measured on an H200"):
            swizzle.tile(mode, 8, row)
