"""llmc.KvPagePool (llmc.serving) on host memory: no GPU needed.

A sequence lifecycle (append, fork, copy on write, tokens read back through
the block tables, truncate, release) with token ids written where the pages'
rows are, and the errors' codes."""

import ctypes

import pytest
import torch

import llmc
from llmc import _capi

from conftest import capi_or_skip

PAGES, PAGE, LAYERS, HEADS, DIM = 6, 4, 2, 2, 4


@pytest.fixture
def pool():
    capi = capi_or_skip()
    if getattr(capi.load(), "llmc_kv_page_pool_create", None) is None:
        pytest.skip("libllmc.so predates the KV page pool")
    with llmc.KvPagePool(PAGES, PAGE, LAYERS, HEADS, DIM, dtype=torch.bfloat16,
                         host_memory=True) as p:
        yield p


def write(pool, slot, token):
    """token into the first 4 bytes of the K row, -token into the V row, of
    every layer."""
    for layer in range(LAYERS):
        ctypes.c_int32.from_address(pool.key_pages(layer) + slot * pool.row_bytes).value = token
        ctypes.c_int32.from_address(pool.value_pages(layer) + slot * pool.row_bytes).value = -token


def read(pool, seq):
    """The tokens of `seq` through its block table (K and V of every layer
    agreeing)."""
    table = pool.block_table(seq)
    n = pool.length(seq)
    assert len(table) == -(-n // PAGE)
    tokens = []
    for j in range(n):
        slot = table[j // PAGE] * PAGE + j % PAGE
        words = set()
        for layer in range(LAYERS):
            k = ctypes.c_int32.from_address(pool.key_pages(layer) + slot * pool.row_bytes).value
            v = ctypes.c_int32.from_address(pool.value_pages(layer) + slot * pool.row_bytes).value
            words.add((k, -v))
        assert len(words) == 1, f"layers or K/V disagree at position {j}: {words}"
        tokens.append(words.pop()[0])
    return tokens


def test_exported():
    assert llmc.KvPagePool is llmc.serving.KvPagePool


def test_lifecycle_with_copy_on_write(pool):
    assert pool.row_bytes == HEADS * DIM * 2
    assert pool.value_pages(0) >= pool.key_pages(0) + PAGES * PAGE * pool.row_bytes
    a = pool.add_sequence()
    slots = pool.append(a, 6)
    assert slots == [0, 1, 2, 3, 4, 5]
    for i, s in enumerate(slots):
        write(pool, s, 100 + i)
    b = pool.fork(a)
    st = pool.stats()
    assert (st["used_pages"], st["shared_pages"], st["tokens"], st["filled_slots"]) == (2, 2, 12, 6)

    # b writes into the shared page 1: it gets page 2, a copy of page 1.
    slots = pool.append(b, 3)
    assert slots == [2 * PAGE + 2, 2 * PAGE + 3, 3 * PAGE]
    assert pool.stats()["pending_copies"] == 1
    pool.apply_pending_copies()
    for i, s in enumerate(slots):
        write(pool, s, 200 + i)
    [s] = pool.append(a, 1)
    assert s == 1 * PAGE + 2  # page 1 is a's alone now
    write(pool, s, 300)

    assert read(pool, a) == [100, 101, 102, 103, 104, 105, 300]
    assert read(pool, b) == [100, 101, 102, 103, 104, 105, 200, 201, 202]
    pool.check_invariants()

    table, lens = pool.batch_metadata([b, a], max_pages=3)
    assert table.dtype == torch.int32 and lens.dtype == torch.int32
    assert table.tolist() == [[0, 2, 3], [0, 1, 0]]
    assert lens.tolist() == [9, 7]

    pool.truncate(b, 5)  # rejected speculative tokens
    assert read(pool, b) == [100, 101, 102, 103, 104]
    st = pool.stats()
    assert st["free_pages"] == 3 and st["copies_on_write"] == 1
    assert st["waste"] == pytest.approx(1 - 8 / 12)  # pages 0, 1, 2: 4 + 3 + 1 rows
    pool.release(a)
    pool.release(b)
    st = pool.stats()
    assert (st["pages"], st["free_pages"], st["sequences"], st["waste"]) == (PAGES, PAGES, 0, 0.0)
    pool.check_invariants()


def test_take_pending_copies(pool):
    for _ in range(2):
        a = pool.add_sequence()
        pool.append(a, 1)
        pool.append(pool.fork(a), 1)
    assert pool.take_pending_copies() == [(0, 1), (2, 3)]
    assert pool.take_pending_copies() == []
    assert pool.stats()["pending_copies"] == 0


def test_out_of_pages_changes_nothing(pool):
    a = pool.add_sequence()
    pool.append(a, 10)  # pages 0, 1, 2
    b = pool.fork(a)
    before = (pool.stats(), pool.block_table(a), pool.block_table(b))
    # A copy of the shared page 2 and 2 more pages; 3 are free.
    with pytest.raises(llmc.LlmcError) as e:
        pool.append(b, 12)
    assert e.value.code == _capi.RESOURCE_EXHAUSTED
    assert f"sequence {b} needs 4 more page(s), 3 free of {PAGES}" in e.value.message
    assert (pool.stats(), pool.block_table(a), pool.block_table(b)) == before
    with pytest.raises(llmc.LlmcError) as e:
        pool.append(b, 10**12)
    assert e.value.code == _capi.RESOURCE_EXHAUSTED
    assert len(pool.append(b, 10)) == 10
    pool.check_invariants()


def test_errors_have_their_codes(pool):
    a = pool.add_sequence()
    pool.release(a)
    for call in (lambda: pool.append(a, 1), lambda: pool.fork(a), lambda: pool.release(a),
                 lambda: pool.truncate(a, 0), lambda: pool.length(a),
                 lambda: pool.block_table(a), lambda: pool.batch_metadata([a], 2)):
        with pytest.raises(llmc.LlmcError) as e:
            call()
        assert e.value.code == _capi.NOT_FOUND
        assert f"sequence {a}" in e.value.message
    b = pool.add_sequence()
    pool.append(b, 5)
    with pytest.raises(llmc.LlmcError) as e:
        pool.truncate(b, 6)
    assert e.value.is_user_error
    with pytest.raises(llmc.LlmcError) as e:
        pool.batch_metadata([b], max_pages=1)
    assert e.value.is_user_error
    with pytest.raises(llmc.LlmcError) as e:
        pool.key_pages(LAYERS)
    assert e.value.is_user_error


def test_bad_options_and_close():
    capi = capi_or_skip()
    if getattr(capi.load(), "llmc_kv_page_pool_create", None) is None:
        pytest.skip("libllmc.so predates the KV page pool")
    with pytest.raises(llmc.LlmcError) as e:
        llmc.KvPagePool(PAGES, 0, LAYERS, HEADS, DIM, host_memory=True)
    assert e.value.is_user_error and "page_size" in e.value.message
    with pytest.raises(llmc.LlmcError) as e:
        llmc.KvPagePool(PAGES, PAGE, LAYERS, HEADS, DIM, dtype=torch.float64, host_memory=True)
    assert e.value.is_user_error and "element_bytes" in e.value.message
    p = llmc.KvPagePool(PAGES, PAGE, LAYERS, HEADS, DIM, dtype=torch.float32, host_memory=True)
    assert p.row_bytes == HEADS * DIM * 4
    p.close()
    p.close()
    with pytest.raises(ValueError):
        p.add_sequence()


def test_ints_outside_int64_are_rejected_not_wrapped(pool):
    # ctypes would pass 2**64 + n as n: append's buffer, sized from the
    # unwrapped value, then overflowed, and the others acted on n.
    a = pool.add_sequence()
    pool.append(a, 5)
    before = (pool.stats(), pool.block_table(a))
    big = 2**64
    for call in (lambda: pool.append(a, big + 20), lambda: pool.append(big + a, 1),
                 lambda: pool.truncate(a, big + 1), lambda: pool.truncate(big + a, 1),
                 lambda: pool.length(big + a), lambda: pool.fork(big + a),
                 lambda: pool.release(big + a), lambda: pool.block_table(big + a),
                 lambda: pool.batch_metadata([big + a], 2),
                 lambda: pool.batch_metadata([a], big + 2),
                 lambda: pool.key_pages(big), lambda: pool.value_pages(-big),
                 lambda: pool.append(a, 2**63), lambda: pool.append(a, -2**63 - 1)):
        with pytest.raises(OverflowError):
            call()
    for call in (lambda: pool.append(a, True), lambda: pool.append(a, 1.0),
                 lambda: pool.length(False), lambda: pool.truncate(a, "1"),
                 lambda: pool.batch_metadata([a], 2.0)):
        with pytest.raises(TypeError):
            call()
    assert (pool.stats(), pool.block_table(a)) == before
    # Anything with __index__ is an int; the int64 extremes reach the C API.
    assert pool.length(torch.tensor(a)) == 5
    with pytest.raises(llmc.LlmcError) as e:
        pool.append(a, 2**63 - 1)
    assert e.value.code == _capi.RESOURCE_EXHAUSTED
    with pytest.raises(llmc.LlmcError) as e:
        pool.length(-2**63)
    assert e.value.code == _capi.NOT_FOUND
    assert (pool.stats(), pool.block_table(a)) == before
    with pytest.raises(OverflowError):
        llmc.KvPagePool(2**64 + PAGES, PAGE, LAYERS, HEADS, DIM, host_memory=True)


def test_bad_max_pages_is_an_llmc_error(pool):
    a = pool.add_sequence()
    pool.append(a, 5)
    for max_pages in (0, -1):
        with pytest.raises(llmc.LlmcError) as e:
            pool.batch_metadata([a], max_pages=max_pages)
        assert e.value.is_user_error and "max_pages" in e.value.message


def test_a_cpu_device_is_not_gpu_0():
    capi = capi_or_skip()
    if getattr(capi.load(), "llmc_kv_page_pool_create", None) is None:
        pytest.skip("libllmc.so predates the KV page pool")
    with pytest.raises(ValueError, match="cpu"):
        llmc.KvPagePool(PAGES, PAGE, LAYERS, HEADS, DIM, device=torch.device("cpu"))
    with llmc.KvPagePool(PAGES, PAGE, LAYERS, HEADS, DIM, device=torch.device("cpu"),
                         host_memory=True) as p:
        assert p.device is None
        st = p.stats()
        assert all(type(st[k]) is int for k in p.STATS) and type(st["waste"]) is float


class _Racing:
    """A pool's library whose `fn` runs `race` (another thread's work) right
    after its first call returns; counts the calls of `fn`."""

    def __init__(self, lib, fn, race):
        self._lib, self._fn, self._race, self.calls = lib, fn, race, 0

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name != self._fn:
            return f

        def call(*args):
            status = f(*args)
            self.calls += 1
            if self.calls == 1:
                self._race()
            return status
        return call


def test_block_table_races_an_append(pool):
    a = pool.add_sequence()
    pool.append(a, 5)
    table = pool.block_table(a)
    lib = pool._lib
    pool._lib = _Racing(lib, "llmc_kv_page_pool_block_table", lambda: pool.append(a, 2 * PAGE))
    try:
        # The table as the call found it, not an error because it grew.
        assert pool.block_table(a) == table
    finally:
        pool._lib = lib
    assert pool.block_table(a)[:len(table)] == table and pool.length(a) == 5 + 2 * PAGE


def test_long_block_tables_and_many_pending_copies():
    capi = capi_or_skip()
    if getattr(capi.load(), "llmc_kv_page_pool_create", None) is None:
        pytest.skip("libllmc.so predates the KV page pool")
    with llmc.KvPagePool(3000, 1, 1, 1, 4, dtype=torch.float32, host_memory=True) as p:
        a = p.add_sequence()
        assert p.append(a, 2500) == list(range(2500))
        assert p.block_table(a) == list(range(2500))
    with llmc.KvPagePool(400, 2, 1, 1, 4, dtype=torch.float32, host_memory=True) as p:
        expected = []
        for i in range(150):
            a = p.add_sequence()
            p.append(a, 1)
            p.append(p.fork(a), 1)
            expected.append((2 * i, 2 * i + 1))
        assert p.stats()["pending_copies"] == 150
        assert p.take_pending_copies() == expected
        assert p.stats()["pending_copies"] == 0
        assert p.take_pending_copies() == []


def test_take_pending_copies_takes_what_is_pending_in_one_call(pool):
    a = pool.add_sequence()
    pool.append(a, 1)
    pool.append(pool.fork(a), 1)  # copy 0 -> 1

    def another_copy():
        c = pool.add_sequence()
        pool.append(c, 1)
        pool.append(pool.fork(c), 1)

    lib = pool._lib
    racing = _Racing(lib, "llmc_kv_page_pool_take_pending_copies", another_copy)
    pool._lib = racing
    try:
        assert pool.take_pending_copies() == [(0, 1)]
    finally:
        pool._lib = lib
    assert racing.calls == 1
    assert pool.take_pending_copies() == [(2, 3)]
