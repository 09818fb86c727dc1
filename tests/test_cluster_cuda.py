"""Clusters, distributed shared memory and TMA multicast by hand (kernels/ops/cluster_cuda.py): the mechanism
read from the PTX and SASS nvcc compiles here, the launchers' checks, the pure-Python plan, references and
traffic, and what Triton 3.6 and TileLang 0.1.15 expose. Running the kernels is the GPU script's job."""
import importlib.util
import shutil

import pytest
import torch

from kernels.lab.check import rel_err
from kernels.lab.errors import ArgumentError, CourseError, NoGPUError, TMAError
from kernels.lab.mode import DEVICE, MODE
from kernels.ops import cluster_cuda as cc

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="no nvcc on PATH: the CUDA toolkit compiles lesson 06")


@pytest.fixture(scope="module")
def code():
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc on PATH: the CUDA toolkit compiles lesson 06")
    return cc.compiled()


@needs_nvcc
def test_dsmem_kernel_is_a_fixed_cluster_of_two_that_writes_through_mapa(code):
    ptx = code.ptx
    assert ".explicitcluster" in ptx and ".reqnctapercluster 2" in ptx
    assert "mapa.shared::cluster.u32" in ptx and "st.shared::cluster.f32" in ptx
    assert "barrier.cluster.arrive.release.aligned" in ptx and "barrier.cluster.wait.acquire.aligned" in ptx
    assert "%cluster_ctarank" in ptx and "%cluster_nctarank" in ptx
    assert "UCGABAR_ARV" in code.sass and "UCGABAR_WAIT" in code.sass  # the cluster barrier in hardware


@needs_nvcc
def test_tile_sums_has_the_multicast_load_beside_the_plain_one(code):
    ptx, sass = code.ptx, code.sass
    multicast = [line for line in ptx.splitlines() if ".multicast::cluster" in line]
    assert multicast and all("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in line
                             for line in multicast)
    assert "fence.mbarrier_init.release.cluster" in ptx
    assert "mbarrier.arrive.shared::cluster.b64" in ptx          # a release sent to rank 0's empty barrier
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    assert "UTMALDG.2D.MULTICAST" in sass
    assert any("UTMALDG.2D " in line and "MULTICAST" not in line for line in sass.splitlines())
    assert cc.marks(ptx)["multicast::cluster"] >= 1 and cc.marks(ptx)["mapa"] == 2


@needs_nvcc
def test_waits_are_bounded_so_a_broken_protocol_cannot_hang_the_gpu(code):
    assert "clock64" in cc.KERNELS and "atomicAdd(timeouts, 1)" in cc.KERNELS
    assert "%clock64" in code.ptx


def _x(*shape, dtype=torch.float16):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("x, message", [
    (lambda: _x(3, 8, dtype=torch.float32), "even, non-zero number of rows"),
    (lambda: _x(2, 2048, dtype=torch.float32), "at most 1024 threads"),
    (lambda: _x(2, 8), "is float16"),
])
def test_dsmem_ring_refuses_what_its_cluster_cannot_take(x, message):
    with pytest.raises(ArgumentError, match=message):
        cc.dsmem_ring(x())


@pytest.mark.parametrize("kwargs, message", [
    (dict(cluster=3), "1, 2, 4 or 8"),
    (dict(rows=100), "power of two"),
    (dict(stages=9), "1 to 8 slots"),
    (dict(rows=256, stages=8), "232,448 B"),
    (dict(clusters=10_000), "cannot be split"),
])
def test_tile_sums_refuses_impossible_plans(kwargs, message):
    with pytest.raises(CourseError, match=message):
        cc.tile_sums(_x(512, 128), **kwargs)


def test_tile_sums_checks_its_tensor_first():
    with pytest.raises(ArgumentError, match="is float32"):
        cc.tile_sums(_x(512, 128, dtype=torch.float32))
    with pytest.raises(CourseError, match="N = 96 is not a multiple of 64"):
        cc.tile_sums(_x(512, 96), clusters=2)
    with pytest.raises(TMAError, match="16-byte"):
        cc.tile_sums(_x(512, 136)[:, 4:132], clusters=2)       # a view 8 bytes past the allocation's start
    with pytest.raises(ArgumentError, match="column sums"):
        cc.tile_sums(_x(512, 128), clusters=2, out=torch.empty(3, 64, device=DEVICE))


@pytest.mark.skipif(MODE == "hopper", reason="on a Hopper GPU the kernels run (the next test)")
def test_without_a_hopper_gpu_the_launchers_say_what_to_read_instead():
    with pytest.raises(NoGPUError, match="compiled"):
        cc.tile_sums(_x(512, 128), clusters=2)
    with pytest.raises(NoGPUError, match="Hopper"):
        cc.dsmem_ring(_x(4, 32, dtype=torch.float32))


@pytest.mark.skipif(MODE != "hopper", reason="clusters, DSMEM and TMA multicast need a Hopper GPU")
@pytest.mark.parametrize("cluster, multicast, shared", [(2, True, False), (4, True, True), (2, False, False)])
def test_on_hopper_the_kernels_match_their_references(cluster, multicast, shared):
    x = _x(4, 32, dtype=torch.float32)
    out, ranks = cc.dsmem_ring(x)
    assert torch.equal(out, cc.dsmem_reference(x)) and ranks.tolist() == [0, 1, 0, 1]
    x = _x(1024, 512)
    sums, timeouts = cc.tile_sums(x, cluster=cluster, multicast=multicast, rows=64, clusters=8, shared=shared)
    cc.check_timeouts(timeouts)
    ref = cc.tile_sums_reference(x, cluster=cluster, rows=64, clusters=8, shared=shared)
    assert rel_err(sums, ref) < 1e-3  # fp32 sums of fp16 tiles, against float64 (lesson 06's tolerance)


def test_dsmem_reference_swaps_the_rows_of_each_cluster():
    x = torch.arange(12.0).view(4, 3)
    assert cc.dsmem_reference(x).tolist() == [x[1].tolist(), x[0].tolist(), x[3].tolist(), x[2].tolist()]


@pytest.mark.parametrize("shared", [False, True])
def test_reference_sums_each_clusters_tiles_once_per_block(shared):
    x = torch.randn(64, 128).half()                  # 8-row tiles: 8 x 2 = 16 tiles, numbered row-major
    ref = cc.tile_sums_reference(x, cluster=2, rows=8, clusters=4, shared=shared)
    assert ref.shape == (8, 64)
    tiles = [x[r:r + 8, c:c + 64].double() for r in range(0, 64, 8) for c in (0, 64)]
    for cluster in range(4):
        mine = tiles if shared else tiles[cluster * 4:(cluster + 1) * 4]
        expect = sum(t.sum(0) for t in mine)
        assert torch.allclose(ref[2 * cluster], expect) and torch.equal(ref[2 * cluster], ref[2 * cluster + 1])


def test_traffic_multicast_reads_l2_once_per_cluster_and_delivers_the_same():
    shape = (131072, 1024)
    for cluster in (2, 4):
        mc = cc.traffic(shape, cluster=cluster, clusters=128 // cluster, multicast=True)
        own = cc.traffic(shape, cluster=cluster, clusters=128 // cluster, multicast=False)
        assert own["l2_reads"] == cluster * mc["l2_reads"] and own["delivered"] == mc["delivered"]
        assert mc["unique"] == own["unique"] == shape[0] * shape[1] * 2 == mc["l2_reads"]
    shared = cc.traffic((2048, 1024), cluster=2, clusters=64, shared=True, multicast=True)
    assert shared["unique"] == 2048 * 1024 * 2 and shared["l2_reads"] == 64 * shared["unique"]


def test_framework_table_says_who_exposes_what():
    rows = {(r["tool"], r["feature"]): r["exposed"] for r in cc.framework_support()}
    assert rows[("Triton 3.6", "clusters")] == "yes" and rows[("Triton 3.6", "TMA multicast")] == "no"
    assert rows[("TileLang 0.1.15", "TMA multicast")] == "yes"
    text = cc.framework_table()
    assert "num_ctas" in text and "copy_cluster" in text and "cluster_mask" in text


def test_triton_num_ctas_makes_a_cluster_but_no_multicast():
    two, one = cc.triton_cluster_evidence(2), cc.triton_cluster_evidence(1)
    assert two["marks"][".reqnctapercluster"] == 1 and one["marks"][".reqnctapercluster"] == 0
    assert two["tma_loads"] >= 2 and two["marks"]["multicast::cluster"] == 0 and two["marks"]["mapa"] == 0
    assert two["utmaldg"] >= 2 and two["utmaldg_multicast"] == 0


@needs_nvcc
@pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="TileLang not installed")
def test_tilelang_copy_cluster_emits_a_multicast_from_rank_zero():
    ev = cc.tilelang_multicast_evidence(2)
    assert ev["multicast_calls"] == 1 and ev["header_has_multicast"]
    assert any("tma_load_multicast" in line and "(uint16_t)(3)" in line for line in ev["lines"])
    assert any("block_rank_in_cluster() == 0" in line for line in ev["lines"])
