"""The test bed's host-memory reserve (stand_ins/cpu_cuda.install_host_memory_reserve): with
SGLang's own 10 GiB reserve a HiCache host pool is refused on a machine with a few GiB available;
with the test bed's 1 GiB reserve the same pool is allowed, and a pool larger than what is left
above that reserve is still refused."""

import cpu_cuda
import sglang.srt.mem_cache.pool_host.base as base

GIB = 1 << 30


def test_small_pool_fits_a_machine_under_ten_gib_available(monkeypatch):
    monkeypatch.setattr(base, "available_host_memory_bytes", lambda **_kw: 5 * GIB)
    monkeypatch.setattr(base, "ranks_per_host", lambda: 1)
    # SGLang's own reserve, even where an earlier test of this process installed the test bed's
    monkeypatch.setattr(base, "HICACHE_HOST_MEMORY_RESERVE_BYTES", cpu_cuda.sglang_host_memory_reserve())
    assert base.HICACHE_HOST_MEMORY_RESERVE_BYTES == 10 * GIB
    assert base.host_memory_budget_bytes(GIB // 50) < 0
    cpu_cuda.install_host_memory_reserve()
    assert base.host_memory_budget_bytes(GIB // 50) == 4 * GIB
    assert base.host_memory_budget_bytes(5 * GIB) < 5 * GIB
