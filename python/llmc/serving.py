"""Serving building blocks over the C API: the paged KV cache's page pool.

`KvPagePool` is llmc_kv_page_pool_t (include/llmc/llmc_c.h;
llmc::rt::KvPagePool in the runtime): PagedAttention's page pool (Kwon et
al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023; vLLM's block manager). Fixed-size pages of K and
V per layer, a block table per sequence, pages shared by forked sequences
(a common prefix is stored once) and copied on write.

    pool = llmc.KvPagePool(num_pages=2048, page_size=16, num_layers=32,
                           num_kv_heads=8, head_dim=128, dtype=torch.bfloat16)
    seq = pool.add_sequence()
    slots = pool.append(seq, len(prompt))     # where the prompt's K/V go
    pool.apply_pending_copies()               # copy-on-write, before the step
    table, lens = pool.batch_metadata([seq], max_pages=64)

The page layout is what `llm.paged_attention` and `llm.paged_kv_append`
read: for each layer, key and value pages [num_pages, page_size,
num_kv_heads, head_dim], row-major; position j of a sequence is row
j % page_size of page block_table[j // page_size], its slot
page * page_size + row.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import _capi
from ._capi import LlmcError  # (raised by every method)


def _i64(x, name: str) -> int:
    """`x` as an int for a C int64_t argument: TypeError unless it is an
    integer (operator.index; bool is not one here), OverflowError outside
    [-2**63, 2**63). ctypes would wrap it silently (2**64 + 40 to 40)."""
    if isinstance(x, bool):
        raise TypeError(f"{name}: expected an int, found bool {x}")
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name}: expected an int, found {type(x).__name__} {x!r}") from None
    if not -2**63 <= v < 2**63:
        raise OverflowError(f"{name}: expected an int64 in [-2**63, 2**63), found {v}")
    return v


class KvPagePool:
    """A paged KV cache's pages and block tables (llmc_kv_page_pool_t).

    Sequences are int ids (from 0, never reused). Errors raise
    `LlmcError`: code 3 (`_capi.INVALID_ARGUMENT`) for a bad argument, 5
    (`NOT_FOUND`) for an unknown or released sequence, 8
    (`RESOURCE_EXHAUSTED`) when an append needs more pages than are free
    (the pool is then unchanged). Thread-safe.

    `host_memory=True` keeps the pages in host memory and copies them with
    memcpy: for tests and CPU-only CI (no GPU is touched; the page
    addresses are host pointers; `device` is ignored). Serving uses GPU
    `device`: an ordinal or a CUDA torch.device (without an index, GPU 0).

    Sequence ids, counts and lengths are ints in int64's range (TypeError
    for other types, bool included; OverflowError outside the range).
    """

    STATS = ("pages", "free_pages", "used_pages", "shared_pages", "sequences", "tokens",
             "filled_slots", "pending_copies", "copies_on_write")

    def __init__(self, num_pages: int, page_size: int, num_layers: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype = torch.bfloat16,
                 device: Union[int, torch.device] = 0, host_memory: bool = False):
        self._lib = _capi.load()
        if getattr(self._lib, "llmc_kv_page_pool_create", None) is None:
            raise _capi.LibraryNotFound(
                f"{self._lib._llmc_path} predates the KV page pool (C API version 6)")
        if isinstance(device, torch.device):
            if device.type != "cuda" and not host_memory:
                raise ValueError(f"device: expected a CUDA device (or host_memory=True), "
                                 f"found {device}")
            ordinal = device.index or 0
        else:
            ordinal = _i64(device, "device")
        if not -2**31 <= ordinal < 2**31:
            raise OverflowError(f"device: expected an int32 ordinal, found {ordinal}")
        self.dtype = dtype
        self.num_pages = _i64(num_pages, "num_pages")
        self.page_size = _i64(page_size, "page_size")
        self.num_layers = _i64(num_layers, "num_layers")
        num_kv_heads = _i64(num_kv_heads, "num_kv_heads")
        head_dim = _i64(head_dim, "head_dim")
        self.host_memory = bool(host_memory)
        self.device = None if host_memory else torch.device("cuda", ordinal)
        element_bytes = torch.empty((), dtype=dtype).element_size()
        self.row_bytes = num_kv_heads * head_dim * element_bytes
        options = _capi._KvPagePoolOptions(self.num_pages, self.page_size, self.num_layers,
                                           num_kv_heads, head_dim, element_bytes,
                                           ordinal, 1 if host_memory else 0)
        handle = ctypes.c_void_p()
        _capi._check(self._lib.llmc_kv_page_pool_create(ctypes.byref(options),
                                                        ctypes.byref(handle)),
                     f"creating a KV page pool of {num_pages} pages of {page_size} tokens "
                     f"({num_layers} layers, {num_kv_heads} KV heads of {head_dim}, {dtype})"
                     + (" in host memory" if host_memory else f" on GPU {ordinal}"))
        self._handle = handle

    def _call(self, fn: str, *args, context: str = ""):
        if not self._handle:
            raise ValueError("KvPagePool is closed")
        _capi._check(getattr(self._lib, fn)(self._handle, *args), context)

    # --- pages ---------------------------------------------------------------

    def key_pages(self, layer: int) -> int:
        """Address of layer `layer`'s key pages [num_pages, page_size,
        num_kv_heads, head_dim] (a device pointer, or a host pointer with
        host_memory)."""
        layer = _i64(layer, "layer")
        k = ctypes.c_uint64()
        self._call("llmc_kv_page_pool_pages", layer, ctypes.byref(k), None,
                   context=f"reading the pages of layer {layer}")
        return k.value

    def value_pages(self, layer: int) -> int:
        """Address of layer `layer`'s value pages (as key_pages)."""
        layer = _i64(layer, "layer")
        v = ctypes.c_uint64()
        self._call("llmc_kv_page_pool_pages", layer, None, ctypes.byref(v),
                   context=f"reading the pages of layer {layer}")
        return v.value

    # --- sequences -----------------------------------------------------------

    def add_sequence(self) -> int:
        """A new, empty sequence."""
        out = ctypes.c_int64()
        self._call("llmc_kv_page_pool_add_sequence", ctypes.byref(out))
        return out.value

    def append(self, seq: int, num_tokens: int) -> List[int]:
        """Reserves the slots of `num_tokens` new tokens at the end of `seq`
        and returns them in position order (all or nothing; a shared last
        page is first replaced by a private copy, pending until
        apply_pending_copies)."""
        seq = _i64(seq, "seq")
        num_tokens = _i64(num_tokens, "num_tokens")
        # Negative counts (code 3) and more tokens than the pool holds (code
        # 8: short of pages) fail before any slot is written.
        fits = 0 <= num_tokens <= self.num_pages * self.page_size
        slots = (ctypes.c_int64 * (max(num_tokens, 1) if fits else 1))()
        self._call("llmc_kv_page_pool_append", seq, num_tokens, slots,
                   context=f"appending {num_tokens} token(s) to sequence {seq}")
        return list(slots[:num_tokens])

    def fork(self, seq: int) -> int:
        """A new sequence sharing every page of `seq` (nothing copied). Fork
        once the rows of `seq` are written."""
        seq = _i64(seq, "seq")
        out = ctypes.c_int64()
        self._call("llmc_kv_page_pool_fork", seq, ctypes.byref(out),
                   context=f"forking sequence {seq}")
        return out.value

    def release(self, seq: int):
        """Ends `seq`; the pages no other sequence holds become free."""
        seq = _i64(seq, "seq")
        self._call("llmc_kv_page_pool_release_sequence", seq,
                   context=f"releasing sequence {seq}")

    def truncate(self, seq: int, length: int):
        """Keeps the first `length` tokens of `seq` (e.g. after rejected
        speculative tokens)."""
        seq = _i64(seq, "seq")
        length = _i64(length, "length")
        self._call("llmc_kv_page_pool_truncate", seq, length,
                   context=f"truncating sequence {seq} to {length} token(s)")

    def length(self, seq: int) -> int:
        seq = _i64(seq, "seq")
        out = ctypes.c_int64()
        self._call("llmc_kv_page_pool_length", seq, ctypes.byref(out),
                   context=f"reading the length of sequence {seq}")
        return out.value

    def block_table(self, seq: int) -> List[int]:
        """The page ids of `seq`: position j is in page table[j // page_size].
        The table as one C call found it (another thread may append
        meanwhile)."""
        seq = _i64(seq, "seq")
        n = ctypes.c_int64()
        context = f"reading the block table of sequence {seq}"
        # A table has at most num_pages entries; a buffer of up to 1024
        # holds most in one call, else it grows to the size the call reports.
        capacity = min(self.num_pages, 1024)
        while True:
            pages = (ctypes.c_int32 * capacity)()
            try:
                self._call("llmc_kv_page_pool_block_table", seq, pages, capacity,
                           ctypes.byref(n), context=context)
                return list(pages[:n.value])
            except LlmcError as e:
                if e.code != _capi.INVALID_ARGUMENT or n.value <= capacity:
                    raise
            capacity = min(self.num_pages, max(n.value, 2 * capacity))

    def batch_metadata(self, seqs: Sequence[int],
                       max_pages: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(block_table, seq_lens) of `seqs` for llm.paged_attention /
        llm.paged_kv_append: int32 CPU tensors [len(seqs), max_pages]
        (entries past a sequence's pages 0) and [len(seqs)]."""
        seqs = [_i64(s, f"seqs[{i}]") for i, s in enumerate(seqs)]
        max_pages = _i64(max_pages, "max_pages")
        ids = (ctypes.c_int64 * max(len(seqs), 1))(*seqs)
        # max_pages < 1 is the C API's to reject (code 3), not torch's.
        table = torch.zeros((len(seqs), max(max_pages, 1)), dtype=torch.int32)
        lens = torch.zeros((len(seqs),), dtype=torch.int32)
        i32 = ctypes.POINTER(ctypes.c_int32)
        self._call("llmc_kv_page_pool_fill_batch_metadata", ids, len(seqs), max_pages,
                   ctypes.cast(table.data_ptr(), i32), ctypes.cast(lens.data_ptr(), i32),
                   context=f"filling the block tables of {len(seqs)} sequence(s)")
        return table, lens

    # --- copy-on-write -------------------------------------------------------

    def apply_pending_copies(self, stream: Optional[int] = None):
        """Makes the pending copy-on-write copies on `stream` (a CUstream
        handle; default: torch's current stream on the pool's GPU, none with
        host_memory)."""
        if stream is None:
            stream = 0 if self.device is None else torch.cuda.current_stream(
                self.device).cuda_stream
        self._call("llmc_kv_page_pool_apply_pending_copies", ctypes.c_void_p(stream),
                   context="copying shared pages (copy on write)")

    def take_pending_copies(self) -> List[Tuple[int, int]]:
        """Takes the copies pending at the call, as (src page, dst page) in
        the order they must run; the caller makes them (every layer, K and
        V). One C call takes up to 64; while more were pending, the next
        call takes the rest (with any another thread recorded meanwhile,
        after them)."""
        copies: List[Tuple[int, int]] = []
        capacity = 64
        n = ctypes.c_int64()
        while True:
            pairs = (ctypes.c_int64 * (2 * capacity))()
            self._call("llmc_kv_page_pool_take_pending_copies", pairs, capacity,
                       ctypes.byref(n), context="taking the pending copies")
            copies += [(pairs[2 * i], pairs[2 * i + 1]) for i in range(n.value)]
            if n.value < capacity:
                return copies
            capacity *= 2

    # --- diagnostics -----------------------------------------------------------

    def stats(self) -> Dict[str, Union[int, float]]:
        """Keys STATS (pages, free/used/shared pages, sequences, tokens,
        filled slots, pending copies, copies on write so far), ints, and
        "waste", a float: 1 - filled slots / (used pages * page_size)."""
        counts = (ctypes.c_int64 * len(self.STATS))()
        waste = ctypes.c_double()
        self._call("llmc_kv_page_pool_stats", counts, len(self.STATS), ctypes.byref(waste))
        stats: Dict[str, Union[int, float]] = dict(zip(self.STATS, list(counts)))
        stats["waste"] = waste.value
        return stats

    def check_invariants(self):
        """Raises LlmcError (code 13) if the bookkeeping is inconsistent;
        for tests."""
        self._call("llmc_kv_page_pool_check_invariants")

    # --- lifetime ------------------------------------------------------------

    def close(self):
        """Frees the pages (also on garbage collection), which the GPU's
        memory pool may hand out again at once: GPU work on them must be
        finished first (e.g. torch.cuda.synchronize())."""
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_kv_page_pool_release(h)
            self._handle = None

    def __enter__(self) -> "KvPagePool":
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
