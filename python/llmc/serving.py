"""Serving building blocks: the paged KV cache's page pool (over the C API)
and the serving step of a Hugging Face LLaMA/Mistral model in the `llm`
dialect (`llama_serving_step_mlir`, `llama_serving_step_weights`,
`write_serving_step_weights`; see "A model step" in docs/serving.md).

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
import math
import operator
import os
import re
import string
from dataclasses import dataclass
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


# --- the serving step of a LLaMA/Mistral model --------------------------------
#
# One iteration of a continuous-batching engine in the `llm` dialect, in the
# calling convention of examples/tiny_llama_serving_step.mlir: the new tokens
# of B sequences packed without padding, the sequence layout of
# llm.paged_attention, each layer's K and V pages donated and returned, and
# the logits of the rows `last_token` names. Weights in nn.Linear layout
# ([out, in]), hence `transpose_rhs` on every matmul.

_MLIR_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
#: kv_cache_dtype of llama_serving_step_mlir (vLLM's names): None keeps the
#: pages in the model's dtype; "fp8" is "fp8_e4m3".
_KV_CACHE_DTYPES = {"fp8": "f8E4M3FN", "fp8_e4m3": "f8E4M3FN", "fp8_e5m2": "f8E5M2"}

#: Arguments before the pages: tokens, positions, cu_seqlens_q, seq_lens,
#: block_table, last_token. The weights start at argument
#: SERVING_STEP_BATCH_ARGS + 2 * num_layers.
SERVING_STEP_BATCH_ARGS = 6


@dataclass(frozen=True)
class _StepShape:
    """The sizes of a LLaMA-style serving step (checked by _step_shape)."""
    layers: int      # L
    hidden: int      # d
    heads: int       # Hq
    kv_heads: int    # Hkv
    head_dim: int    # D
    ffn: int         # F
    vocab: int       # V
    eps: float
    rope_rows: int

    def weight_shapes(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """(argument name, shape) of every weight argument, in order."""
        d, f = self.hidden, self.ffn
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = [("wte", (self.vocab, d)), ("rope_cos", (self.rope_rows, self.head_dim)),
                  ("rope_sin", (self.rope_rows, self.head_dim))]
        for l in range(self.layers):
            shapes += [(f"attn_norm_w{l}", (d,)), (f"wq{l}", (q, d)), (f"wk{l}", (kv, d)),
                       (f"wv{l}", (kv, d)), (f"wo{l}", (d, q)), (f"ffn_norm_w{l}", (d,)),
                       (f"w_gate{l}", (f, d)), (f"w_up{l}", (f, d)), (f"w_down{l}", (d, f))]
        return shapes + [("final_norm_w", (d,)), ("lm_head", (self.vocab, d))]


def _positive(x, name: str) -> int:
    """`x` as a positive int: ValueError otherwise (bool is not an int here)."""
    if not isinstance(x, bool):
        try:
            v = operator.index(x)
            if v > 0:
                return v
        except TypeError:
            pass
    raise ValueError(f"{name}: expected a positive int, found {x!r}")


def _config_int(config, name: str, default=None) -> int:
    v = getattr(config, name, None)
    if v is None:
        if default is None:
            raise ValueError(f"config: missing {name} (expected a positive int)")
        v = default
    return _positive(v, f"config.{name}")


def _rope_parameters(config) -> List[Tuple[str, Dict]]:
    """The RoPE parameter dicts of an HF config, as (attribute, dict):
    transformers 5's `rope_parameters` (which `rope_scaling` aliases there)
    and 4.x's `rope_scaling` (None: default RoPE), those that are set."""
    found = []
    for attr in ("rope_scaling", "rope_parameters"):
        p = getattr(config, attr, None)
        if p is None:
            continue
        if not isinstance(p, dict):
            raise ValueError(f"config.{attr}: expected a dict or None, found {p!r}")
        if any(isinstance(v, dict) for v in p.values()):
            raise ValueError(f"config.{attr} = {p!r}: per-layer-type RoPE parameters are not "
                             f"supported (LLaMA/Mistral have one set)")
        found.append((attr, p))
    return found


def _rope_theta(config) -> float:
    theta = getattr(config, "rope_theta", None)
    for _, p in _rope_parameters(config):
        theta = p.get("rope_theta", theta)
    if theta is None:
        raise ValueError("config: missing rope_theta (config.rope_theta, or "
                         "config.rope_parameters['rope_theta'] in transformers 5)")
    theta = float(theta)
    if not (math.isfinite(theta) and theta > 0):
        raise ValueError(f"config rope_theta: expected a positive number, found {theta}")
    return theta


def _step_shape(config, rope_rows: Optional[int]) -> _StepShape:
    """The step's sizes from a LlamaConfig/MistralConfig-like `config`, or
    ValueError naming what the step does not support."""
    for attr, params in _rope_parameters(config):
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in (None, "default"):
            raise ValueError(
                f"config rope scaling {rope_type!r} (config.{attr} = {params!r}) is not "
                f"supported: the step's RoPE tables are HF's default RoPE (rope_type "
                f"'default' or rope_scaling None)")
    for bias in ("attention_bias", "mlp_bias"):
        if getattr(config, bias, False):
            raise ValueError(f"config.{bias} = True is not supported: the step's projections "
                             f"have no bias (LLaMA/Mistral have none)")
    act = getattr(config, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"config.hidden_act = {act!r} is not supported: the step's MLP is "
                         f"SwiGLU (silu)")
    layers = _config_int(config, "num_hidden_layers")
    hidden = _config_int(config, "hidden_size")
    heads = _config_int(config, "num_attention_heads")
    kv_heads = _config_int(config, "num_key_value_heads", heads)
    if getattr(config, "head_dim", None) is None and hidden % heads:
        raise ValueError(f"config: hidden_size {hidden} is not a multiple of "
                         f"num_attention_heads {heads}, and head_dim is not given")
    head_dim = _config_int(config, "head_dim", hidden // heads)
    if heads % kv_heads:
        raise ValueError(f"config: num_key_value_heads {kv_heads} does not divide "
                         f"num_attention_heads {heads} (grouped-query attention)")
    if head_dim % 2:
        raise ValueError(f"config: head_dim {head_dim} is odd (RoPE rotates pairs)")
    eps = getattr(config, "rms_norm_eps", None)
    try:
        ok = not isinstance(eps, bool) and math.isfinite(float(eps)) and float(eps) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"config.rms_norm_eps: expected a positive number, found {eps!r}")
    if rope_rows is None:
        rope_rows = _config_int(config, "max_position_embeddings")
    rope_rows = _positive(rope_rows, "rope_rows")
    window = getattr(config, "sliding_window", None)
    if window is not None and rope_rows > window:
        raise ValueError(
            f"config.sliding_window = {window} is not supported with rope_rows = {rope_rows}: "
            f"the step's attention is full causal attention, which equals sliding-window "
            f"attention only while every position is below the window; pass "
            f"rope_rows <= {window} (positions < rope_rows)")
    return _StepShape(layers, hidden, heads, kv_heads, head_dim,
                      _config_int(config, "intermediate_size"),
                      _config_int(config, "vocab_size"), float(eps), rope_rows)


def _f64(x: float) -> str:
    """`x` as an MLIR float literal (round-trips; always has a '.')."""
    s = repr(float(x))
    mantissa, e, exponent = s.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def _tensor(shape, dtype: str) -> str:
    return "tensor<" + "x".join("?" if n is None else str(n) for n in shape) + f"x{dtype}>"


# One layer of the step: attention over the paged cache (RMSNorm, Q/K/V
# projections, RoPE from the gathered tables, append K and V into the pages,
# paged attention, output projection, residual), then the SwiGLU MLP.
_LAYER = """\
  // Layer ${l}: attention over the paged cache.
  %h${l} = llm.rms_norm %x${l}, %attn_norm_w${l} {eps = ${eps} : f64} : ${act_d}, ${vec_d}
  %q${l} = llm.matmul %h${l}, %wq${l} {transpose_rhs} : ${act_d}, ${w_q} -> ${act_q}
  %k${l} = llm.matmul %h${l}, %wk${l} {transpose_rhs} : ${act_d}, ${w_kv} -> ${act_kv}
  %v${l} = llm.matmul %h${l}, %wv${l} {transpose_rhs} : ${act_d}, ${w_kv} -> ${act_kv}
  %q4_${l} = llm.reshape %q${l} : ${act_q} to ${q4}
  %k4_${l} = llm.reshape %k${l} : ${act_kv} to ${k4}
  %qr${l} = llm.rope %q4_${l} cos(%cos : ${table}) sin(%sin : ${table}) half_split : ${q4}
  %kr${l} = llm.rope %k4_${l} cos(%cos : ${table}) sin(%sin : ${table}) half_split : ${k4}
  %qt${l} = llm.reshape %qr${l} : ${q4} to ${q3}
  %kt${l} = llm.reshape %kr${l} : ${k4} to ${k3}
  %vt${l} = llm.reshape %v${l} : ${act_kv} to ${k3}
  %kp${l} = llm.paged_kv_append %k_pages${l}, %kt${l}, %block_table, %cu_seqlens_q, %seq_lens${append_scale} : ${pages}, ${k3}, ${bt}, ${i32s}, ${i32s}${append_scale_type}
  %vp${l} = llm.paged_kv_append %v_pages${l}, %vt${l}, %block_table, %cu_seqlens_q, %seq_lens${append_scale} : ${pages}, ${k3}, ${bt}, ${i32s}, ${i32s}${append_scale_type}
  %a${l} = llm.paged_attention %qt${l}, %kp${l}, %vp${l}, %block_table, %cu_seqlens_q, %seq_lens${attn_scales} {causal} : ${q3}, ${pages}, ${pages}, ${bt}, ${i32s}, ${i32s}${attn_scales_types}
  %a2_${l} = llm.reshape %a${l} : ${q3} to ${act_q}
  %o${l} = llm.matmul %a2_${l}, %wo${l} {transpose_rhs} : ${act_q}, ${w_o} -> ${act_d}
  %r${l} = llm.add %x${l}, %o${l} : ${act_d}
  // Layer ${l}: SwiGLU MLP.
  %m${l} = llm.rms_norm %r${l}, %ffn_norm_w${l} {eps = ${eps} : f64} : ${act_d}, ${vec_d}
  %g${l} = llm.matmul %m${l}, %w_gate${l} {transpose_rhs} : ${act_d}, ${w_f} -> ${act_f}
  %u${l} = llm.matmul %m${l}, %w_up${l} {transpose_rhs} : ${act_d}, ${w_f} -> ${act_f}
  %s${l} = llm.silu %g${l} : ${act_f}
  %f${l} = llm.mul %s${l}, %u${l} : ${act_f}
  %d${l} = llm.matmul %f${l}, %w_down${l} {transpose_rhs} : ${act_f}, ${w_down} -> ${act_d}
  %x${next} = llm.add %r${l}, %d${l} : ${act_d}
"""


def llama_serving_step_mlir(config, *, num_pages: int, page_size: int, max_pages: int,
                            dtype: torch.dtype = torch.bfloat16, rope_rows: Optional[int] = None,
                            function: str = "serving_step", kv_cache_dtype: Optional[str] = None,
                            kv_scale: float = 1.0) -> str:
    """The serving step of a Hugging Face LLaMA/Mistral model
    (LlamaForCausalLM, MistralForCausalLM) as `llm` dialect text: one
    `func.func @<function>` in the calling convention of
    examples/tiny_llama_serving_step.mlir, over a paged KV cache
    (PagedAttention: Kwon et al., "Efficient Memory Management for Large
    Language Model Serving with PagedAttention", SOSP 2023). One step runs
    the new tokens of B sequences packed together, any mix of prefill
    chunks and decode tokens.

    `config`: a transformers LlamaConfig / MistralConfig, or any object with
    num_hidden_layers (L), hidden_size (d), num_attention_heads (Hq),
    num_key_value_heads (Hkv; default Hq), head_dim (D; default d / Hq),
    intermediate_size (F), vocab_size (V), rms_norm_eps and
    max_position_embeddings. DT is `dtype` (torch.float32, bfloat16 or
    float16: MLIR f32, bf16, f16); every weight, page and the logits are DT.

    Arguments, in order (T tokens, B sequences, R logit rows, P =
    `num_pages`; `?` dimensions are named by llm.dim_names):
      0 tokens       [T] i32 ("tokens"): token ids, packed by sequence;
      1 positions    [T] i32 ("tokens"): each token's position in its
                     sequence, in [0, rope_rows);
      2 cu_seqlens_q [B + 1] i32 ("seqs_plus_one"): sequence b's tokens are
                     rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1;
      3 seq_lens     [B] i32 ("seqs"): each sequence's length, this step's
                     tokens included;
      4 block_table  [B, max_pages] i32 ("seqs"): position j of sequence b
                     is row j % page_size of page block_table[b, j // page_size];
      5 last_token   [R] i32 ("logit_rows"): the packed rows whose logits
                     the step returns;
      6 + 2l, 7 + 2l k_pages<l>, v_pages<l> [P, page_size, Hkv, D] DT, for
                     l < L: layer l's key and value pages, row-major, donated
                     (`llm.donate`); result 1 + 2l and 2 + 2l alias them
                     (`llm.aliasing_output`);
      then the weights (llama_serving_step_weights gives them), nn.Linear
      layout [out, in]: wte [V, d], rope_cos and rope_sin [rope_rows, D]
      (HF's cat(freqs, freqs) half-split layout), per layer attn_norm_w
      [d], wq [Hq*D, d], wk [Hkv*D, d], wv [Hkv*D, d], wo [d, Hq*D],
      ffn_norm_w [d], w_gate [F, d], w_up [F, d], w_down [d, F], then
      final_norm_w [d] and lm_head [V, d].
    Results: logits [R, V] DT (row i: the logits after the token in packed
    row last_token[i]), then the 2L updated pages (K then V per layer).

    Each layer is HF LlamaDecoderLayer: RMSNorm, Q/K/V projections, RoPE
    (half split, from the tables gathered at `positions`), the new K/V rows
    appended into the pages (llm.paged_kv_append), causal paged attention
    with GQA and scale 1/sqrt(D) (llm.paged_attention), output
    projection, residual; RMSNorm, SwiGLU MLP (silu(x w_gate^T) * x
    w_up^T) w_down^T, residual. Then the final RMSNorm and the LM head on
    the `last_token` rows only. With tie_word_embeddings, pass wte again as
    lm_head.

    `kv_cache_dtype` (vLLM's names): None keeps the pages in DT; "fp8" or
    "fp8_e4m3" (f8E4M3FN) and "fp8_e5m2" (f8E5M2) store them in 8 bits, half
    the bytes of bf16 for decode to read (issue 20). Each page element is
    then k / kv_scale (saturating at the format's largest value, 448 or
    57344), and attention reads it times kv_scale: one scale, a positive
    finite float, for every KV head of every layer, K and V (vLLM's
    default is 1.0; choose about the largest |K| and |V| over 448 for
    e4m3, so that small values keep their precision). Nothing else
    changes: the pages' arguments and results take the fp8 type.

    `rope_rows` (default max_position_embeddings) is the RoPE tables' row
    count; positions must be below it. num_pages, page_size, max_pages and
    rope_rows are positive ints, and max_pages * page_size <= rope_rows (no
    sequence reaches past the tables).

    Raises ValueError for a size that is not a positive int, a `dtype`
    other than float32/bfloat16/float16, a kv_cache_dtype other than None,
    "fp8", "fp8_e4m3" or "fp8_e5m2", a kv_scale that is not a positive
    finite float32 normal number (or given without kv_cache_dtype), a `function` that is not an MLIR
    identifier, and for what the step does not compute as HF does: a RoPE
    scaling other than the default (rope_type other than 'default', e.g.
    'linear', 'llama3', 'yarn'), attention_bias or mlp_bias, a hidden_act
    other than silu, and a Mistral sliding_window below rope_rows (the step
    attends to every earlier key; pass rope_rows <= sliding_window, so that
    no position reaches past the window).
    """
    shape = _step_shape(config, rope_rows)
    num_pages = _positive(num_pages, "num_pages")
    page_size = _positive(page_size, "page_size")
    max_pages = _positive(max_pages, "max_pages")
    if max_pages * page_size > shape.rope_rows:
        raise ValueError(f"max_pages * page_size = {max_pages * page_size}: a sequence that "
                         f"long reaches past the RoPE tables' {shape.rope_rows} rows; expected "
                         f"at most rope_rows (raise rope_rows or lower max_pages)")
    if dtype not in _MLIR_DTYPES:
        raise ValueError(f"dtype: expected torch.float32, torch.bfloat16 or torch.float16, "
                         f"found {dtype}")
    if not isinstance(function, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$.]*", function):
        raise ValueError(f"function: expected an MLIR identifier ([A-Za-z_][A-Za-z0-9_$.]*), "
                         f"found {function!r}")
    if kv_cache_dtype is not None and kv_cache_dtype not in _KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: expected None, 'fp8', 'fp8_e4m3' or 'fp8_e5m2', "
                         f"found {kv_cache_dtype!r}")
    # The scale is an f32 constant of the step: it must stay positive and
    # finite once rounded to float32 (1e39 would become inf, 1e-46 zero).
    if isinstance(kv_scale, bool) or not isinstance(kv_scale, (int, float)) or \
            not math.isfinite(kv_scale) or kv_scale <= 0 or \
            not (torch.finfo(torch.float32).tiny <= kv_scale <= torch.finfo(torch.float32).max):
        raise ValueError(f"kv_scale: expected a positive finite number within float32's normal "
                         f"range, found {kv_scale!r}")
    if kv_cache_dtype is None and kv_scale != 1.0:
        raise ValueError("kv_scale scales an fp8 KV cache: give kv_cache_dtype too")
    dt = _MLIR_DTYPES[dtype]
    L, d, Hq, Hkv, D = shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
    page_dt = _KV_CACHE_DTYPES[kv_cache_dtype] if kv_cache_dtype else dt
    scale_t = _tensor([Hkv], "f32")
    fp8_kv = dict(append_scale="", append_scale_type="", attn_scales="", attn_scales_types="")
    if kv_cache_dtype:
        fp8_kv = dict(append_scale=" scale %kv_scale", append_scale_type=f", {scale_t}",
                      attn_scales=" scales(%kv_scale, %kv_scale)",
                      attn_scales_types=f", {scale_t}, {scale_t}")
    F, V = shape.ffn, shape.vocab
    t = _tensor
    types = dict(
        eps=_f64(shape.eps), act_d=t([None, d], dt), vec_d=t([d], dt),
        w_q=t([Hq * D, d], dt), act_q=t([None, Hq * D], dt), w_kv=t([Hkv * D, d], dt),
        act_kv=t([None, Hkv * D], dt), q4=t([1, None, Hq, D], dt), k4=t([1, None, Hkv, D], dt),
        table=t([1, None, D], dt), q3=t([None, Hq, D], dt), k3=t([None, Hkv, D], dt),
        pages=t([num_pages, page_size, Hkv, D], page_dt), bt=t([None, max_pages], "i32"),
        i32s=t([None], "i32"), w_o=t([d, Hq * D], dt), w_f=t([F, d], dt),
        act_f=t([None, F], dt), w_down=t([d, F], dt))
    pages = types["pages"]
    i32s = types["i32s"]

    args = [f'%tokens: {i32s} {{llm.dim_names = ["tokens"]}}',
            f'%positions: {i32s} {{llm.dim_names = ["tokens"]}}',
            f'%cu_seqlens_q: {i32s} {{llm.dim_names = ["seqs_plus_one"]}}',
            f'%seq_lens: {i32s} {{llm.dim_names = ["seqs"]}}',
            f'%block_table: {types["bt"]} {{llm.dim_names = ["seqs"]}}',
            f'%last_token: {i32s} {{llm.dim_names = ["logit_rows"]}}']
    for l in range(L):
        for i, kv in enumerate("kv"):
            args.append(f"%{kv}_pages{l}: {pages} "
                        f"{{llm.donate, llm.aliasing_output = {1 + 2 * l + i} : i64}}")
    args += [f"%{name}: {t(list(s), dt)}" for name, s in shape.weight_shapes()]
    result_types = [t([None, V], dt)] + [pages] * (2 * L)

    table2 = t([None, D], dt)
    rope_table = t([shape.rope_rows, D], dt)
    lines = [
        "// A serving step of a LLaMA-style model over a paged KV cache, generated by",
        "// llmc.serving.llama_serving_step_mlir in the calling convention of",
        "// examples/tiny_llama_serving_step.mlir.",
        f"// Layers {L}, d = {d}, {Hq} query heads and {Hkv} KV heads of {D}, SwiGLU {F},",
        f"// vocab {V}, {dt}; pages [{num_pages}, {page_size}, {Hkv}, {D}], block table",
        f"// [B, {max_pages}], RoPE tables [{shape.rope_rows}, {D}].",
        f"func.func @{function}(",
        ",\n".join("    " + a for a in args) + ")",
        f"    -> ({', '.join(result_types)}) {{",
        f"  %x0 = llm.gather %wte, %tokens axis = 0 : {t([V, d], dt)}, {i32s}",
        f"  %cos2 = llm.gather %rope_cos, %positions axis = 0 : {rope_table}, {i32s}",
        f"  %sin2 = llm.gather %rope_sin, %positions axis = 0 : {rope_table}, {i32s}",
        f"  %cos = llm.reshape %cos2 : {table2} to {types['table']}",
        f"  %sin = llm.reshape %sin2 : {table2} to {types['table']}",
    ]
    if kv_cache_dtype:
        lines.insert(6, f"// KV cache {page_dt}: pages hold K / {_f64(kv_scale)} and V / "
                        f"{_f64(kv_scale)} (llm.paged_kv_append scale).")
        lines.append(f"  %kv_scale = llm.constant dense<{_f64(kv_scale)}> : {scale_t}")
    layer = string.Template(_LAYER)
    body = [layer.substitute(types, l=l, next=l + 1, **fp8_kv) for l in range(L)]
    act_d = types["act_d"]
    results = ["%logits"] + [f"%{kv}p{l}" for l in range(L) for kv in "kv"]
    tail = [
        "  // The rows of `last_token`: final norm and LM head.",
        f"  %xl = llm.gather %x{L}, %last_token axis = 0 : {act_d}, {i32s}",
        f"  %hn = llm.rms_norm %xl, %final_norm_w {{eps = {types['eps']} : f64}} : "
        f"{act_d}, {types['vec_d']}",
        f"  %logits = llm.matmul %hn, %lm_head {{transpose_rhs}} : {act_d}, {t([V, d], dt)} -> "
        f"{result_types[0]}",
        f"  return {', '.join(results)} : {', '.join(result_types)}",
        "}",
    ]
    return "\n".join(lines) + "\n" + "".join(body) + "\n".join(tail) + "\n"


def _rope_tables(config, rope_rows: int, head_dim: int, dtype: torch.dtype,
                 device) -> Tuple[torch.Tensor, torch.Tensor]:
    """HF's default RoPE tables (LlamaRotaryEmbedding): inv_freq = 1 /
    theta^(2i / D) for i < D/2, freqs = position * inv_freq, cos and sin of
    cat(freqs, freqs) [rope_rows, D]; float32 as HF, then cast to `dtype`
    (HF casts cos/sin to the activations' dtype)."""
    theta = _rope_theta(config)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.arange(rope_rows, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos().to(device=device, dtype=dtype).contiguous(),
            emb.sin().to(device=device, dtype=dtype).contiguous())


def llama_serving_step_weights(model, *, dtype: Optional[torch.dtype] = None,
                               rope_rows: Optional[int] = None) -> List[torch.Tensor]:
    """The weight arguments of llama_serving_step_mlir(model.config, ...),
    in order, from a Hugging Face LlamaForCausalLM / MistralForCausalLM:
    wte [V, d] (model.embed_tokens), rope_cos and rope_sin [rope_rows, D],
    per layer attn_norm_w [d] (input_layernorm), wq [Hq*D, d], wk [Hkv*D,
    d], wv [Hkv*D, d], wo [d, Hq*D] (self_attn.{q,k,v,o}_proj), ffn_norm_w
    [d] (post_attention_layernorm), w_gate [F, d], w_up [F, d], w_down [d,
    F] (mlp.{gate,up,down}_proj), then final_norm_w [d] (model.norm) and
    lm_head [V, d]. Projections in nn.Linear layout [out, in], all
    row-major contiguous, detached, on the model's device, in `dtype`
    (default: the embedding's dtype; float32, bfloat16 or float16). A
    weight already in `dtype` and contiguous is the model's own storage,
    not a copy. With tie_word_embeddings lm_head is the same tensor as wte.

    The RoPE tables are HF's default RoPE (LlamaRotaryEmbedding): inv_freq
    = 1 / theta^(2i / D) (theta: config.rope_theta, or transformers 5's
    config.rope_parameters["rope_theta"]), row p = cos / sin of cat(p *
    inv_freq, p * inv_freq) (the half-split layout of HF's rotate_half),
    computed in float32 and then cast to `dtype`. `rope_rows` (default
    max_position_embeddings) must be the one given to
    llama_serving_step_mlir.

    Raises ValueError for what llama_serving_step_mlir rejects (the same
    config checks) and for a weight whose shape is not the config's, and
    TypeError for a model without .model.embed_tokens/.layers/.norm and
    .lm_head.
    """
    config = model.config
    shape = _step_shape(config, rope_rows)
    base = getattr(model, "model", None)
    lm_head = getattr(model, "lm_head", None)
    if base is None or lm_head is None or not all(
            hasattr(base, a) for a in ("embed_tokens", "layers", "norm")):
        raise TypeError(f"expected a LlamaForCausalLM or MistralForCausalLM (.model with "
                        f"embed_tokens, layers and norm; .lm_head), found {type(model).__name__}")
    if len(base.layers) != shape.layers:
        raise ValueError(f"model: {len(base.layers)} layers, but config.num_hidden_layers is "
                         f"{shape.layers}")
    embed = base.embed_tokens.weight
    dtype = embed.dtype if dtype is None else dtype
    if dtype not in _MLIR_DTYPES:
        raise ValueError(f"dtype: expected torch.float32, torch.bfloat16 or torch.float16, "
                         f"found {dtype}")

    def w(p: torch.Tensor) -> torch.Tensor:
        return p.detach().to(dtype=dtype).contiguous()

    wte = w(embed)
    cos, sin = _rope_tables(config, shape.rope_rows, shape.head_dim, dtype, embed.device)
    weights = [wte, cos, sin]
    for layer in base.layers:
        attn, mlp = layer.self_attn, layer.mlp
        weights += [w(layer.input_layernorm.weight), w(attn.q_proj.weight),
                    w(attn.k_proj.weight), w(attn.v_proj.weight), w(attn.o_proj.weight),
                    w(layer.post_attention_layernorm.weight), w(mlp.gate_proj.weight),
                    w(mlp.up_proj.weight), w(mlp.down_proj.weight)]
    weights += [w(base.norm.weight), wte if lm_head.weight is embed else w(lm_head.weight)]
    for tensor, (name, expected) in zip(weights, shape.weight_shapes()):
        if tuple(tensor.shape) != expected:
            raise ValueError(f"model weight {name}: expected shape {list(expected)} from the "
                             f"config, found {list(tensor.shape)}")
    return weights


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def write_serving_step_weights(tensors: Sequence[torch.Tensor], directory: Union[str, os.PathLike],
                               first_argument: int) -> List[str]:
    """Writes tensors[i] to DIRECTORY/arg<first_argument + i>.bin (the
    directory is created if missing) and returns the paths: the tensor's
    raw storage, row-major, little-endian, no header (bf16 and f16 as their
    2-byte storage), e.g. the weights of llama_serving_step_weights with
    first_argument = SERVING_STEP_BATCH_ARGS + 2 * num_layers (6 + 2L).
    This is the form `llmc-run --input argI=FILE.bin` and `llmc-serve
    --weights DIR` read (they check that the byte size is exactly the
    argument's). Tensors on a GPU are copied to the host first.

    Raises TypeError for a non-tensor or an element size other than 1, 2,
    4 or 8 bytes, ValueError for a negative first_argument.
    """
    if isinstance(first_argument, bool) or not isinstance(first_argument, int) \
            or first_argument < 0:
        raise ValueError(f"first_argument: expected an int >= 0, found {first_argument!r}")
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}]: expected a torch.Tensor, found {type(t).__name__}")
        as_int = _INT_OF_SIZE.get(t.element_size())
        if as_int is None:
            raise TypeError(f"tensors[{i}]: {t.dtype} ({t.element_size()}-byte elements) has "
                            f"no raw form here")
        data = t.detach().to("cpu").contiguous().reshape(-1).view(as_int).numpy()
        path = os.path.join(os.fspath(directory), f"arg{first_argument + i}.bin")
        with open(path, "wb") as f:
            f.write(data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes())
        paths.append(path)
    return paths


# --- the serving engine ------------------------------------------------------


@dataclass
class FinishedRequest:
    """A request the engine finished: every generated token (the stop token
    included), why it ended ("stop_token", "max_new_tokens" or "failed"),
    and, when failed, the error."""
    id: int
    tokens: List[int]
    reason: str
    error: str = ""


_FINISH_REASONS = ("stop_token", "max_new_tokens", "failed")


class ServingEngine:
    """Continuous batching over a paged KV cache (llmc_serving_engine_t;
    llmc::rt::ServingEngine): requests join and leave the running batch at
    every step (Orca, OSDI 2022), prompts are prefilled in chunks alongside
    the decodes under a token budget (Sarathi-Serve, OSDI 2024), and the
    KV cache lives in pages (PagedAttention, SOSP 2023) that the engine
    allocates for the step's shape.

    `step_mlir` is a serving step in the calling convention of
    llmc/runtime/ServingStep.h (e.g. `llama_serving_step_mlir(config, ...)`)
    and `weights` its arguments from 6 + 2 * layers on, in order
    (`llama_serving_step_weights(model)`): CUDA tensors on `device`, kept
    alive and unchanged by the engine's lifetime. On the GPU every step is
    padded to one of `token_buckets` (default: powers of two up to 32, then
    multiples of 64 up to `max_batch_tokens`), each compiled once and
    replayed as a CUDA graph. `reference=True` runs the same engine on the
    CPU reference executor (weights on the CPU; tests and CI).

        engine = llmc.serving.ServingEngine(step, weights, max_batch_tokens=512)
        engine.add_request(0, prompt_ids, max_new_tokens=64)
        finished = engine.run()            # {request id: FinishedRequest}

    Errors raise `LlmcError` naming the argument or field: code 3 for a bad
    argument (a weight of the wrong dtype or shape, a request longer than the
    step's block table, a token outside the vocabulary), 8 when the KV pages
    do not fit, 9 without a GPU. Not thread-safe beyond serialization.
    """

    STATS = ("steps", "batched_tokens", "prefill_tokens", "decode_tokens",
             "recomputed_tokens", "max_step_tokens", "partial_prefills", "preemptions",
             "requests_added", "requests_finished", "requests_failed", "generated_tokens",
             "waiting", "running", "kv_pages", "kv_used_pages")

    def __init__(self, step_mlir: str, weights: Sequence[torch.Tensor], *,
                 function: Optional[str] = None, max_batch_tokens: int = 256,
                 max_sequences: int = 32, token_buckets: Optional[Sequence[int]] = None,
                 reference: bool = False, cuda_graphs: bool = True,
                 device: Union[int, torch.device] = 0,
                 compiler_options: Optional[Dict[str, object]] = None):
        self._lib = _capi.load()
        if getattr(self._lib, "llmc_serving_engine_create", None) is None:
            raise _capi.LibraryNotFound(
                f"{self._lib._llmc_path} predates the serving engine (C API version 7)")
        ordinal = (device.index or 0) if isinstance(device, torch.device) else _i64(device, "device")
        self._weights = []
        tensors = (_capi._Tensor * max(1, len(weights)))()
        self._shapes = []
        for i, w in enumerate(weights):
            if not isinstance(w, torch.Tensor):
                raise TypeError(f"weights[{i}]: expected a torch.Tensor, found {type(w).__name__}")
            if w.dtype not in _capi.TORCH_TO_LLMC:
                raise TypeError(f"weights[{i}]: dtype {w.dtype} is not one llmc runs")
            if reference and w.device.type != "cpu":
                raise ValueError(f"weights[{i}]: reference=True reads weights on the CPU, "
                                 f"found {w.device}")
            if not reference and w.device.type != "cuda":
                raise ValueError(f"weights[{i}]: the GPU engine reads CUDA tensors, "
                                 f"found {w.device} (or pass reference=True)")
            w = w.detach().contiguous()
            if w.numel() and w.data_ptr() % _capi.Session.TENSOR_ALIGN:
                # A view into the middle of a flat buffer: the engine takes
                # 16-byte aligned weights (rt::kTensorAlignment).
                w = w.clone()
            self._weights.append(w)
            shape = (ctypes.c_int64 * max(1, w.dim()))(*w.shape)
            self._shapes.append(shape)
            tensors[i] = _capi._Tensor(w.data_ptr(), _capi.TORCH_TO_LLMC[w.dtype], w.dim(),
                                       shape, None)
        buckets = None
        if token_buckets is not None:
            buckets = (ctypes.c_int64 * max(1, len(token_buckets)))(
                *[_i64(t, "token_buckets") for t in token_buckets])
        options = _capi._ServingEngineOptions(
            _i64(max_batch_tokens, "max_batch_tokens"), _i64(max_sequences, "max_sequences"),
            buckets, len(token_buckets) if token_buckets is not None else 0, ordinal,
            1 if cuda_graphs else 0, 1 if reference else 0)
        self._compiler = None if reference else _capi.Compiler(compiler_options)
        handle = ctypes.c_void_p()
        text = step_mlir.encode()
        _capi._check(self._lib.llmc_serving_engine_create(
            self._compiler._handle if self._compiler else None, text,
            function.encode() if function else None, tensors, len(weights),
            ctypes.byref(options), ctypes.byref(handle)), "creating the serving engine")
        self._handle = handle

    def _call(self, fn: str, *args, context: str = ""):
        if not self._handle:
            raise ValueError("the serving engine is closed")
        _capi._check(getattr(self._lib, fn)(self._handle, *args), context or fn)

    def warmup(self):
        """Compiles and loads every token bucket now (GPU), so that no step
        waits for a compile."""
        self._call("llmc_serving_engine_warmup", context="compiling the token buckets")

    def add_request(self, request_id: int, prompt: Sequence[int], *, max_new_tokens: int = 16,
                    temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                    stop_tokens: Sequence[int] = ()):
        """Queues a request (first come, first served). Greedy with
        temperature 0; else a draw from the top-p nucleus of softmax(logits /
        temperature) seeded by (seed, request id, token index), so a
        request's tokens do not depend on its batch."""
        ids = [int(t) for t in prompt]
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        stop = [int(t) for t in stop_tokens]
        stop_arr = (ctypes.c_int32 * max(1, len(stop)))(*stop)
        params = _capi._SamplingParams(float(temperature), float(top_p),
                                       _i64(seed, "seed") & (2**64 - 1),
                                       _i64(max_new_tokens, "max_new_tokens"),
                                       stop_arr if stop else None, len(stop))
        self._call("llmc_serving_engine_add_request", _i64(request_id, "request_id"), arr,
                   len(ids), ctypes.byref(params), context=f"adding request {request_id}")

    def step(self) -> Tuple[List[Tuple[int, int]], List[FinishedRequest]]:
        """One iteration: the (request id, token) pairs generated and the
        requests finished."""
        n_tok, n_fin = ctypes.c_int64(), ctypes.c_int64()
        self._call("llmc_serving_engine_step", ctypes.byref(n_tok), ctypes.byref(n_fin),
                   context="a serving step")
        tokens = []
        rid, tok = ctypes.c_int64(), ctypes.c_int32()
        for i in range(n_tok.value):
            self._call("llmc_serving_engine_step_token", i, ctypes.byref(rid), ctypes.byref(tok))
            tokens.append((rid.value, tok.value))
        finished = []
        reason = ctypes.c_int32()
        data = ctypes.POINTER(ctypes.c_int32)()
        count = ctypes.c_int64()
        error = ctypes.c_char_p()
        for i in range(n_fin.value):
            self._call("llmc_serving_engine_step_finished", i, ctypes.byref(rid),
                       ctypes.byref(reason), ctypes.byref(data), ctypes.byref(count),
                       ctypes.byref(error))
            finished.append(FinishedRequest(rid.value, [data[k] for k in range(count.value)],
                                            _FINISH_REASONS[reason.value],
                                            (error.value or b"").decode(errors="replace")))
        return tokens, finished

    def has_work(self) -> bool:
        out = ctypes.c_int32()
        self._call("llmc_serving_engine_has_work", ctypes.byref(out))
        return bool(out.value)

    def run(self) -> Dict[int, FinishedRequest]:
        """Steps until every request has finished."""
        done: Dict[int, FinishedRequest] = {}
        while self.has_work():
            for f in self.step()[1]:
                done[f.id] = f
        return done

    def stats(self) -> Dict[str, Union[int, float]]:
        """The engine's counters (STATS) and kv_waste, the unfilled slots of
        the used pages. The used pages include those the engine reserves for
        padding steps to their token bucket: ceil(the largest gap below a
        bucket / page_size) pages."""
        counts = (ctypes.c_int64 * len(self.STATS))()
        waste = ctypes.c_double()
        self._call("llmc_serving_engine_stats", counts, len(self.STATS), ctypes.byref(waste))
        out: Dict[str, Union[int, float]] = dict(zip(self.STATS, counts))
        out["kv_waste"] = waste.value
        return out

    def close(self):
        """Releases the engine and its KV pages (idempotent)."""
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_serving_engine_release(h)
            self._handle = None

    def __enter__(self) -> "ServingEngine":
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
