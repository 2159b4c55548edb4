"""The sweep's memory budget: every term present and growing with what drives it,
and a limit that cannot be met refused up front (issue 19 item 4).

Peak RSS itself is measured by tools/memory_check.py, not here (shared machines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from planner.kernel import state as S
from planner.sweep import driver
from planner.sweep.driver import MemoryBudget
from planner.sweep.spec import load_spec

ROOT = Path(__file__).parents[1]
S1_CSV = ROOT / "planner" / "data" / "s1_seed7.csv"
MiB = 2**20

SPEC = """
name = "m"
horizon_s = 10.0

[workload]
kind = "trace"
path = "{csv}"

[scheduler]
max_model_len = 4096
block_size = {block_size}
num_gpu_blocks = {blocks}
enable_prefix_caching = {caching}

[axes]
max_num_seqs = [8, 64]
"""


def spec(tmp_path: Path, block_size: int = 16, blocks: int = 4000, caching: bool = False) -> Path:
    p = tmp_path / f"m-{block_size}-{blocks}-{caching}.toml"
    p.write_text(
        SPEC.format(csv=S1_CSV, block_size=block_size, blocks=blocks, caching=str(caching).lower())
    )
    return p


def scratch(**kw: int | bool) -> int:
    args = dict(
        num_requests=100,
        num_gpu_blocks=1000,
        block_size=16,
        max_num_seqs=64,
        longest_tokens=2000,
        caching=False,
        async_scheduling=False,
    )
    args.update(kw)
    return S.kernel_scratch_bytes(**args)


def test_state_bytes_match_the_allocation():
    """bytes_per_config counts every array allocate builds (the arrivals included)."""
    for r in (1, 7, 1000):
        st = S.allocate(1, r)
        held = sum(a.nbytes for rec in (st.req, st.queues, st.out, st.remote) for a in rec)
        assert S.bytes_per_config(r) == held
    assert driver.config_bytes(2000) > driver.config_bytes(1000) > S.bytes_per_config(1000)


def test_histogram_grows_with_block_size_up_to_the_fast_path_cap():
    """The fast path's hist is (min(block_size, FAST_PATH_MAX_BLOCK_SIZE) + 1)
    int64, with or without caching (with caching the block tables and the
    livelock snapshot's copy of them, 2 x 64 rows of int32, shrink as blocks
    grow); above the cap the fast path is off and hist stays that size."""
    cap = S.FAST_PATH_MAX_BLOCK_SIZE
    for caching in (False, True):
        small = scratch(block_size=16, caching=caching)
        big = scratch(block_size=cap, caching=caching)
        assert big - small >= 8 * (cap - 16) - 2 * 4 * 64 * (-(-2000 // 16) + 2)
        assert scratch(block_size=2**27, caching=caching) <= big


def test_prefix_cache_pool_grows_with_num_gpu_blocks_only_when_caching():
    assert scratch(num_gpu_blocks=5_000_000) == scratch(num_gpu_blocks=1000)
    small = scratch(num_gpu_blocks=1000, caching=True)
    big = scratch(num_gpu_blocks=5_000_000, caching=True)
    # ref/hnext/hprev/fpos int32, hkey int64, a free-queue ring of >= 2N int32,
    # a table of >= 2N slots
    assert big - small >= (4 * 3 + 8 + 8) * (5_000_000 - 1000) + 16 * 2 * (5_000_000 - 1000)
    assert S.pool_table_capacity(5_000_000) == 2**24
    assert S.pool_table_capacity(1) == 4


def test_block_tables_grow_with_max_num_seqs_requests_and_length_when_caching():
    base = scratch(caching=True)
    assert scratch(caching=True, max_num_seqs=128) > base
    assert scratch(caching=True, num_requests=1000) > base
    assert scratch(caching=True, longest_tokens=20000) > base
    assert scratch(max_num_seqs=128) == scratch()  # no tables without caching


def test_async_skip_buffer_grows_with_requests():
    for n in (100, 10_000):
        assert scratch(async_scheduling=True, num_requests=n) - scratch(num_requests=n) == 4 * (
            n - 1
        )


def test_livelock_snapshot_grows_with_requests_and_the_pool():
    """cycle.new_cycle: (11 + 6) int32 per request and 9 scalars; with caching
    also 2 per request (its hashed blocks and junction), the block tables
    (S x maxb, one row per KV cache group) and 4 per block, however large the
    pool (no size turns detection off)."""
    assert scratch(num_requests=10_000) - scratch() == 4 * 17 * (10_000 - 100)
    on = {"caching": True}
    grow = scratch(num_requests=10_000, **on) - scratch(**on)
    assert grow > 4 * 16 * (10_000 - 100)
    per_block = scratch(num_gpu_blocks=20_000, **on) - scratch(num_gpu_blocks=10_000, **on)
    assert per_block >= 4 * 4 * 10_000
    big = 2**26  # a snapshot of 4 x 2^26 int32 entries: past the old 16 Mi cap
    assert S.cycle_cache_entries(100, big, 64, 126) == 200 + 64 * 126 + 4 * big
    assert S.cycle_cache_entries(100, 1000, 64, 126) == 200 + 64 * 126 + 4000
    # a hybrid's tables: a row per group of each request slot (64 x 126 blocks)
    rows = scratch(caching=True, kv_groups=3) - scratch(caching=True)
    assert rows >= 2 * 64 * 126 * 4 * 2  # the table and its snapshot, int32


def test_budget_terms_and_threads():
    b = MemoryBudget(1000 * MiB, 200 * MiB, 64 * MiB, "cached", threads=2, calls=MiB)
    assert b.fixed == 265 * MiB and b.available == 735 * MiB
    # scratch counts once per thread running at once, state once per config
    assert b.chunk_bytes(1, 10, 100) == 110
    assert b.chunk_bytes(5, 10, 100) == 50 + 200
    one_thread = MemoryBudget(1000 * MiB, 200 * MiB, 64 * MiB, "cached", threads=1, calls=MiB)
    per, scr = 3 * MiB, 100 * MiB
    assert b.fit(per, scr) < one_thread.fit(per, scr)
    for budget in (b, one_thread):
        k = budget.fit(per, scr)
        assert budget.chunk_bytes(k, per, scr) <= budget.available
        assert budget.chunk_bytes(k + 1, per, scr) > budget.available
    assert MemoryBudget(300 * MiB, 290 * MiB, 64 * MiB, "cached", 2).fit(per, scr) == 0


@pytest.mark.parametrize(
    ("states", "allowance"),
    [
        ({False: "loaded", True: "loaded"}, 0),
        ({False: "cached", True: "loaded"}, driver.JIT_LOAD_BYTES),
        ({False: "cached", True: "cached"}, 2 * driver.JIT_LOAD_BYTES),
        ({False: "loaded", True: "cold"}, driver.JIT_COMPILE_EACH_BYTES),  # one is in already
        ({False: "cached", True: "unknown"}, driver.JIT_LOAD_BYTES + driver.JIT_COMPILE_BYTES),
    ],
)
def test_jit_allowance_follows_the_cache(monkeypatch, states, allowance):
    """Keyed by the kernel variant (without and with prefix caching): each
    variant not in the process is charged, loaded from the cache or compiled
    (the first compiled one at the first variant's cost when none is in)."""
    from planner import api

    monkeypatch.setattr(api, "kernel_status", lambda n, fleet=False, cache=False, *a: states[cache])
    assert driver.jit_bytes(False, (False, True))[0] == allowance
    assert driver.jit_bytes(False, (False,))[0] == driver.jit_bytes(False, (False, False))[0]
    assert driver.JIT_COMPILE_BYTES > driver.JIT_LOAD_BYTES > 0
    budget = driver.chunk_budget(4 * 2**30, threads=3, caching=(False, True))
    assert budget.jit == allowance and budget.threads == 3
    assert budget.process > 0


def test_plan_counts_inputs_and_shrinks_chunks_with_the_pool(tmp_path):
    budget = MemoryBudget(900 * MiB, 100 * MiB, 64 * MiB, "cached", 2)
    plain = driver.plan_chunks(load_spec(spec(tmp_path)), None, budget)
    r = load_spec(spec(tmp_path)).workloads[()].num_requests
    assert plain.budget.calls == driver.CALL_BYTES_PER_REQUEST * r
    assert plain.budget.fixed == 164 * MiB + plain.budget.calls
    assert plain.budget.dataset == driver.DATASET_BYTES_PER_CONFIG * 2  # two configs
    cached = driver.plan_chunks(
        load_spec(spec(tmp_path, blocks=5_000_000, caching=True)), None, budget
    )
    assert cached.scratch_bytes[()] > 300 * MiB > plain.scratch_bytes[()]
    assert cached.peak_bytes <= budget.limit
    assert cached.peak_bytes > plain.peak_bytes
    assert cached.sizes[()] == 1 < plain.sizes[()]  # one 390 MiB pool fits, two do not


def test_plan_refuses_saying_how_much_is_needed(tmp_path):
    sw = load_spec(spec(tmp_path, blocks=5_000_000, caching=True))
    budget = MemoryBudget(300 * MiB, 200 * MiB, 64 * MiB, "cached", 2)
    with pytest.raises(driver.SweepError) as e:
        driver.plan_chunks(sw, None, budget)
    need = 264 * MiB + driver.config_bytes(sw.workloads[()].num_requests)
    need += driver.scratch_bytes(sw, sw.ids_by_workload()[()], ())
    need += driver.CALL_BYTES_PER_REQUEST * sw.workloads[()].num_requests
    assert f"needs at least {need / MiB:,.0f} MiB" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_final_merge_grows_with_the_grid_and_can_refuse(tmp_path):
    """The merge of all rows needs room beside the fixed part, not beside a chunk."""
    axes = "max_num_seqs = { start = 1, stop = 10000, num = 10000 }\n"
    axes += 'preemption_mode = ["recompute", "restart"]'
    text = spec(tmp_path).read_text().replace("max_num_seqs = [8, 64]", axes)  # 20,000 configs
    # vLLM starts only with max_num_batched_tokens >= max_num_seqs
    budget_line = "max_model_len = 4096\nmax_num_batched_tokens = 10000"
    text = text.replace("max_model_len = 4096", budget_line)
    path = tmp_path / "big.toml"
    path.write_text(text)
    sw = load_spec(path)
    budget = MemoryBudget(200 * MiB, 100 * MiB, 0, "loaded", 1)
    plan = driver.plan_chunks(sw, None, budget)
    assert plan.budget.dataset == driver.DATASET_BYTES_PER_CONFIG * 20_000
    assert plan.peak_bytes == plan.budget.fixed + max(plan.largest_chunk_bytes, plan.budget.dataset)
    with pytest.raises(driver.SweepError, match="final merge"):
        driver.plan_chunks(sw, None, MemoryBudget(140 * MiB, 100 * MiB, 0, "loaded", 1))


@pytest.mark.parametrize("kw", [dict(blocks=5_000_000, caching=True)], ids=["pool"])
def test_cli_refuses_before_any_work(capsys, tmp_path, kw):
    """One line, exit 2, nothing written, when one config cannot fit the limit."""
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        capsys, "sweep", str(spec(tmp_path, **kw)), "--out", str(out), "--memory-limit", "400MiB"
    )
    assert code == 2
    assert err.count("\n") == 1 and "needs at least" in err and "Traceback" not in err
    assert not out.exists()
    code, _, err = run_cli(
        capsys, "sweep", str(spec(tmp_path, **kw)), "--dry-run", "--memory-limit", "400MiB"
    )
    assert code == 2 and "needs at least" in err


@pytest.mark.parametrize(
    "text,expected",
    [("4GiB", 4 * 2**30), ("512MB", 512 * 10**6), ("1e9", 10**9), ("4 gib", 4 * 2**30),
     ("0.5GiB", 2**29), ("4096", 4096),
     ("2e-5GiB", None), ("3p", None), ("4GiB-junk", None), ("4GiB 7", None), ("\u0661GiB", None),
     ("0", None), ("", None), ("GiB", None)],
)  # fmt: skip
def test_memory_limit_text_is_read_whole_or_refused(text, expected):
    """Second tryout of issue 35: '2e-5GiB' was read as 2 EB and '4GiB-junk' as 4 GiB."""
    if expected is None:
        with pytest.raises(ValueError, match="--memory-limit"):
            driver.parse_memory(text)
    else:
        assert driver.parse_memory(text) == expected
