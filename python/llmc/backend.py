"""The `llmc` torch.compile backend.

    torch.compile(model, backend="llmc", options={...})

As torch-mlir's dynamo backend does: AOTAutograd normalizes the Dynamo graph
(core ATen decompositions, functionalization; a forward and, for training, a
backward graph), each graph is partitioned (`partition.py`), every llmc
subgraph is imported (`importer.py`) and compiled through the C API
(`_capi.py`) per input shape, and a boxed callable is returned.

Dynamic shapes (`dynamic_buckets`, default "pow2"): a subgraph whose
dynamic dimensions can be padded exactly (`bucketing.analyze`: positions stay
independent, or only causally masked attention keys see the padding) is
compiled once per bucket and run on inputs padded to it, outputs sliced back;
others are compiled per concrete size. The report says which. A KV cache
grown by `cat` (Hugging Face's default dynamic cache) is bucketed too: the
imported graph is rewritten so the new rows land at the real length and the
attention masks the padded keys (`bucketing.rewrite`, fed the real lengths
as extra inputs), so generate() compiles once per bucket of the cache
length, not once per token.

Debug check (`check=True` or LLMC_CHECK=1): every llmc subgraph also runs in
PyTorch on the same inputs; the first output beyond the tolerance raises
`CheckMismatch` (check="warn": warns and goes on) naming the graph, the
subgraph, the output and the errors, with its IR, inputs and an llmc-run
command line dumped to LLMC_DUMP_DIR (or a temporary directory).

Fallbacks, each announced once with `warnings.warn`:
  * no libllmc.so with the C API: every subgraph runs in PyTorch;
  * compiling a subgraph fails (e.g. an op the CUDA codegen does not lower):
    that subgraph runs in PyTorch, the message names the op and shapes;
  * a call of a bucketed subgraph whose sizes break the relations its plan
    needs (linked symbols, such as a padding mask's length and the keys'):
    that call runs in PyTorch;
  * no GPU, or CPU inputs: the subgraph is still imported and compiled (NVRTC
    needs no GPU), then runs in PyTorch.
With `strict=True` (or LLMC_STRICT=1) the first three raise `FallbackRefused`
instead (from the backend call when importing fails, so Dynamo's
`suppress_errors` decides; from the compiled call otherwise); CPU inputs
still run in PyTorch.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import operator
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx

from . import _capi, bucketing, fold, importer, partition

log = logging.getLogger("llmc")

__all__ = ["llmc_backend", "last_report", "reports", "Options", "CheckMismatch"]

_reports: List[partition.Report] = []
_warned: set = set()
_graph_ids = itertools.count()
_lock = threading.Lock()


def last_report() -> Optional[partition.Report]:
    """The report of the most recently compiled FX graph (str() it to read)."""
    return _reports[-1] if _reports else None


def reports() -> List[partition.Report]:
    """Reports of every graph compiled in this process, oldest first."""
    return list(_reports)


def reset():
    """Forgets reports and one-time warnings (tests)."""
    _reports.clear()
    _warned.clear()


def _artifact(name: str, payload: str, compile_id=None):
    """A tlparse artifact (torch._logging.trace_structured, written when
    TORCH_TRACE is set); nothing on a torch without it. `compile_id`: the
    Dynamo compile the artifact belongs to, for artifacts written later (an
    llmc subgraph compiles at its first call, outside Dynamo's compile)."""
    trace = getattr(torch._logging, "trace_structured", None)
    if trace is None:
        return
    kw = {}
    if compile_id is not None and _accepts(trace, "compile_id"):
        kw["compile_id"] = compile_id
        if _accepts(trace, "expect_trace_id"):
            kw["expect_trace_id"] = False
    trace("artifact", metadata_fn=lambda: {"name": name, "encoding": "string"},
          payload_fn=lambda: payload, **kw)


@functools.lru_cache(maxsize=None)
def _accepts(fn, param: str) -> bool:
    """Whether `fn` takes keyword `param` (newer torch APIs grow keywords)."""
    import inspect
    try:
        return param in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _current_compile_id():
    """The id of the Dynamo compile running now, or None."""
    try:
        from torch._guards import CompileContext
        return CompileContext.current_compile_id()
    except Exception:  # an older torch, or no compile running
        return None


def warn_once(key: str, message: str):
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class CheckMismatch(AssertionError):
    """check=True: an llmc subgraph's output differs from PyTorch's."""


class FallbackRefused(RuntimeError):
    """strict=True: a subgraph llmc took could not be imported, compiled or
    loaded (or the library is missing); the message says why."""


# Relative L2 error bounds of the debug check, by the least precise float type
# a subgraph touches. float32: llmc-run's 1e-5 is against a float64
# reference; here both sides are float32 with different summation orders
# (and reductions over thousands of terms), hence 1e-4. bf16/f16: the bound the
# compiler's precision policies are held to (2e-2).
CHECK_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2,
             torch.float8_e4m3fn: 0.125, torch.float8_e5m2: 0.125}


# The compiler's numerics policies (llmc::ApplyPrecisionPolicy, llmc-run
# --precision).
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
WEIGHT_ONLY = ("none", "int8", "int4")
FP8_SCALINGS = ("tensor", "row")
PARTITIONS = ("default", "mincut")
PREPARE_PARAMETERS = ("on_change", "every_call")


def invalidate_parameters():
    """Makes every live llmc session prepare its weights again on its next
    call (Options.prepare_parameters): call it after changing weights in a
    way PyTorch's version counters do not see, e.g. `p.data.add_(...)`, an
    update of a flat buffer the parameters are `.data` views of, or
    `staging.copy_(w)` into a tensor assigned to `p.data`."""
    _capi.invalidate_all_parameters()


@dataclass
class Options:
    """torch.compile(..., options={...}) of the llmc backend.

    dynamic_buckets: "pow2" (default; buckets 16, 32, 64, ...), a positive
        int (multiples of it), a list of sizes (larger sizes compile exactly)
        or "none": how dynamic dimensions are bucketed where exact.
        `bucket` is an older name of it.
    precision: None (the graph's own types) or one of PRECISIONS ("fp32",
        "bf16", "fp16", "fp8"), the compiler's numerics policy; arch: the
        GPU to compile for ("sm_90a"; default: the one present). Any other
        value is a ValueError, as for every option. Under "fp8", backward
        graphs quantize gradients (AOTAutograd's tangents and what is
        computed from them) to e5m2 and everything else to e4m3
        (Transformer Engine's HYBRID format).
    fp8_scaling: "tensor" (default: one scale per GEMM operand) or "row"
        (one per row of the LHS and per column of the RHS, torchao's
        rowwise recipe: an outlier row no longer costs the others their
        precision); only with precision="fp8".
    weight_only: None/"none", "int8" or "int4": weight-only quantization of
        the model's linear weights (parameters of rank 2 whose K is a
        multiple of 128; one scale per 128 weights along K), done once per
        parameter set in the session's preparation and dequantized inside
        the decode GEMVs (CompilerOptions::weight_only). Not with "fp8".
    check: False, True (raise CheckMismatch) or "warn"; LLMC_CHECK=1 (or
        =warn) sets it. check_tol overrides the relative L2 bound CHECK_TOL.
    partition: "default" (PyTorch's default_partition after AOTAutograd's
        CSE of the joint graph: the forward saves every intermediate the
        backward reads, each once) or "mincut" (Inductor's
        min-cut rematerialization: fewer, smaller saved tensors, cheap ops
        recomputed in the backward); LLMC_PARTITION sets it when not given.
        How AOTAutograd splits a training graph; inference graphs ignore it.
    prepare_parameters: "on_change" (default) or "every_call". Work that
        depends on the weights alone (bf16/fp16 casts, fp8 scaling,
        weight_only quantization, pads and relayouts of weights, whatever
        the precision) runs once per set of weights, not on every call.
        "on_change" redoes it when a weight is a new tensor or was updated
        in place where PyTorch's version counter sees it (optimizer steps,
        no_grad in-place ops, load_state_dict, copy_). Writes the counter does not see (through
        `p.data`, into a flat buffer the parameters are `.data` views of,
        into a tensor assigned to `p.data`) need `llmc.invalidate_parameters()`
        after them, or "every_call" (preparation on every call, as training
        graphs always do).
    strict: False (default; LLMC_STRICT=1 sets it) or True: raise
        FallbackRefused where llmc would run a subgraph in PyTorch because it
        could not import, compile or load it, or the library is missing.
    cuda_graphs (default False; True with torch.compile's
        mode="reduce-overhead"): each session replays its launches as a CUDA
        graph (SessionOptions::use_cuda_graphs). Subgraph inputs that do not
        stay at fixed addresses (not parameters, buffers or donated caches:
        a token, a position) and outputs of at most STAGE_BYTES are copied
        through buffers of the session, so a decode step replays one graph
        whatever tensors PyTorch hands over. Up to 4 graphs per compiled
        shape, keyed by the input/output pointers (PyTorch's caching
        allocator usually hands the same few buffers back), also on
        PyTorch's default (legacy) stream through a private stream joined
        with events; graphs are turned off for a session when capture fails
        or the pointers change on most calls. What makes a graph valid here:
        every kernel argument is fixed by the executable (no host value that
        changes between calls), the arena, workspaces and prepared-parameter
        buffers belong to the session, and parameter preparation (and
        training's always_prepare) runs eagerly before the graph, so
        in-place weight updates are seen; donated (in-place) outputs are
        part of the pointer key. On the H200 (2026-11-29) the graph tests
        pass (SessionGpuTest.Graph*, CapiGpu.Graphs*, logits vs eager in
        test_cuda_graphs.py) and graphs save ~50 us per LLaMA forward
        (1x128: 0.383 vs 0.433 ms); still off by default because the rest of
        the GPU suite (training, bucketed dynamic shapes) has not been run
        with graphs on.
    """
    precision: Optional[str] = None
    fp8_scaling: str = "tensor"
    weight_only: Optional[str] = None
    cuda_graphs: bool = False
    dynamic_buckets: Any = "pow2"
    bucket: Any = None
    cache_dir: Optional[str] = None
    dump_dir: Optional[str] = None
    arch: Optional[str] = None
    check: Any = None
    check_tol: Optional[float] = None
    strict: Optional[bool] = None
    partition: Optional[str] = None
    prepare_parameters: str = "on_change"

    @classmethod
    def from_dict(cls, d: Optional[Dict[str, Any]]) -> "Options":
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"llmc: unknown option(s) {sorted(unknown)}; "
                             f"known: {sorted(known)}")
        o = cls(**d)
        if o.dump_dir is None:
            o.dump_dir = os.environ.get("LLMC_DUMP_DIR") or None
        if o.bucket is not None:
            if "dynamic_buckets" in d and d["dynamic_buckets"] != o.bucket:
                raise ValueError("llmc: give dynamic_buckets or bucket (its old name), not both")
            o.dynamic_buckets = o.bucket
        o.dynamic_buckets = bucketing.parse_buckets(o.dynamic_buckets)
        o.bucket = None
        if o.check is None:
            env = os.environ.get("LLMC_CHECK", "").strip().lower()
            o.check = {"": False, "0": False, "1": True, "warn": "warn"}.get(env)
            if o.check is None:
                raise ValueError(f"llmc: LLMC_CHECK must be 0, 1 or warn, got {env!r}")
        if o.strict is None:
            env = os.environ.get("LLMC_STRICT", "").strip()
            o.strict = {"": False, "0": False, "1": True}.get(env)
            if o.strict is None:
                raise ValueError(f"llmc: LLMC_STRICT must be 0 or 1, got {env!r}")
        if o.partition is None:
            o.partition = os.environ.get("LLMC_PARTITION", "default")
        if o.partition not in PARTITIONS:
            raise ValueError(f"llmc: partition (or LLMC_PARTITION) must be one of "
                             f"{', '.join(PARTITIONS)}, got {o.partition!r}")
        if o.prepare_parameters not in PREPARE_PARAMETERS:
            raise ValueError(f"llmc: prepare_parameters must be one of "
                             f"{', '.join(PREPARE_PARAMETERS)}, got {o.prepare_parameters!r}")
        if o.strict not in (False, True):
            raise ValueError(f"llmc: strict must be False or True, got {o.strict!r}")
        if o.check not in (False, True, "warn"):
            raise ValueError(f"llmc: check must be False, True or 'warn', got {o.check!r}")
        if o.check_tol is not None and not (isinstance(o.check_tol, (int, float))
                                            and o.check_tol > 0):
            raise ValueError(f"llmc: check_tol must be a positive number, got {o.check_tol!r}")
        # A bad value must not reach the compiler: its error would turn into a
        # fallback to eager with a warning, the model silently unaccelerated.
        if o.precision is not None and o.precision not in PRECISIONS:
            raise ValueError(f"llmc: precision must be one of {', '.join(PRECISIONS)} "
                             f"(or None: as written), got {o.precision!r}")
        if o.fp8_scaling not in FP8_SCALINGS:
            raise ValueError(f"llmc: fp8_scaling must be one of {', '.join(FP8_SCALINGS)}, "
                             f"got {o.fp8_scaling!r}")
        if o.fp8_scaling != "tensor" and o.precision != "fp8":
            raise ValueError(f"llmc: fp8_scaling={o.fp8_scaling!r} needs precision='fp8', "
                             f"got precision={o.precision!r}")
        if o.weight_only is not None and o.weight_only not in WEIGHT_ONLY:
            raise ValueError(f"llmc: weight_only must be one of {', '.join(WEIGHT_ONLY)} "
                             f"(or None), got {o.weight_only!r}")
        if o.weight_only in ("int8", "int4") and o.precision == "fp8":
            raise ValueError("llmc: weight_only and precision='fp8' both quantize the weights; "
                             "choose one")
        # rt::IsValidArch's rule: 2-4 digits, no leading zero, 'a' from 90
        # and 'f' from 100 on.
        m = re.fullmatch(r"(?:sm|compute)_([1-9]\d{1,3})([af]?)", o.arch) \
            if isinstance(o.arch, str) else None
        if o.arch is not None and not (m and (m.group(2) == ""
                                              or (m.group(2) == "a" and int(m.group(1)) >= 90)
                                              or (m.group(2) == "f" and int(m.group(1)) >= 100))):
            raise ValueError(f"llmc: arch must look like sm_90a, sm_80 or compute_90 "
                             f"(sm_<NN> or compute_<NN>, optionally with an 'a' suffix from "
                             f"sm_90 on or an 'f' suffix from sm_100 on), got {o.arch!r}")
        return o

    def compiler_options(self) -> Dict[str, Any]:
        opts: Dict[str, Any] = {}
        if self.arch:
            opts["arch"] = self.arch
        if self.cache_dir:
            opts["cache_dir"] = self.cache_dir
        if self.precision:
            opts["precision"] = self.precision
        if self.fp8_scaling != "tensor":
            opts["fp8_scaling"] = self.fp8_scaling
        if self.weight_only and self.weight_only != "none":
            opts["weight_only"] = self.weight_only
        return opts


_compilers: Dict[Tuple, _capi.Compiler] = {}


def _compiler(options: Options) -> _capi.Compiler:
    key = tuple(sorted(options.compiler_options().items()))
    with _lock:
        c = _compilers.get(key)
        if c is None:
            c = _capi.Compiler(options.compiler_options())
            _compilers[key] = c
        return c


def _shape_str(tensors: Sequence[Any]) -> str:
    return ", ".join(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
                     if isinstance(t, torch.Tensor) else repr(t) for t in tensors)


class _Entry:
    """One compiled shape of a subgraph: its executable and import, the
    session (created on the first GPU call), and what the fast path of
    `LlmcSubgraph.forward` precomputes for it: the placeholder index of each
    llmc argument, the non-tensor arguments it was compiled for, the
    arguments that are 0-dim CPU tensors (moved to the GPU per call), and per
    real size of the padded symbols the restride actions of the results."""
    __slots__ = ("exe", "imp", "session", "args", "scalars", "lifted", "restride")

    def __init__(self, exe, imp):
        self.exe = exe
        self.imp = imp
        self.session = None
        self.args: List[int] = list(imp.arg_placeholders)
        self.scalars: Tuple[Tuple[int, Any], ...] = ()
        self.lifted: List[int] = []
        self.restride: Dict[Tuple, List[Tuple[int, Optional[Tuple[int, ...]]]]] = {}


_NO_SIZES: Dict[str, Tuple[int, int]] = {}


class LlmcSubgraph(torch.nn.Module):
    """One llmc subgraph: compiled per input shape (or bucket), PyTorch as the fallback."""

    def __init__(self, eager: torch.fx.GraphModule, name: str, options: Options,
                 report: partition.Report, index: int = 0,
                 donate: Optional[Dict[int, int]] = None,
                 updates: Optional[set] = None,
                 static: Optional[set] = None,
                 saved: Optional[set] = None,
                 copied_back: Optional[Tuple[set, set]] = None):
        super().__init__()
        self.eager = eager
        # (placeholders, FX output indices) of mutated inputs that are not
        # donated: their new values only go back into the inputs (see
        # _copied_back), so the inputs are not staged and the outputs reuse
        # one tensor each (_capi.Session's persistent_outputs).
        self.copied_back_inputs, self.copied_back_outputs = (set(copied_back[0]), set(copied_back[1])) \
            if copied_back else (set(), set())
        # Outputs (FX output indices) that only become tensors a training
        # forward saves for its backward (see _saved_outputs): allocated
        # together (_capi.Session's packed_outputs).
        self.saved = set(saved or ())
        # Saved outputs that are reshapes of one value: {FX output: the FX
        # output whose memory it shares} (_capi.Session's output_views).
        self.saved_views = _reshapes_of_one_value(eager, self.saved)
        # Placeholder index -> output index of the inputs updated in place
        # (see _donations).
        self.donate = dict(donate or {})
        # The donated placeholders whose new value is an in-place update
        # (llm.aliasing_output) rather than a KV-cache write: written in
        # place where the executable aliases them (see _donations).
        self.updates = set(updates or ())
        # With options.check: the old values of those inputs in this call.
        self._pre_update: Optional[Dict[int, torch.Tensor]] = None
        # Placeholders fed by inputs at fixed addresses (parameters, buffers;
        # see _static_placeholders); None: unknown, all taken as static.
        self.static = static
        self.name = name
        self.index = index
        self.options = options
        self._compile_id = _current_compile_id()  # for tlparse artifacts written later
        self.report = report
        self.disabled: Optional[str] = None
        self.sessions: Dict[Tuple, Any] = {}
        self.compiled_shapes: set = set()
        self.placeholders = [n for n in eager.graph.nodes if n.op == "placeholder"]
        out_node = next(n for n in eager.graph.nodes if n.op == "output")
        outs = out_node.args[0]
        self.out_metas = [importer._meta(o) for o in
                          (outs if isinstance(outs, (tuple, list)) else [outs])]
        # Placeholders that are not tensors (SymInt sizes, constants): their
        # values are part of a compiled shape. Any placeholder without
        # metadata turns the fast path off.
        self._scalar_args = [i for i, n in enumerate(self.placeholders)
                             if not isinstance(n.meta.get("val"), torch.Tensor)]
        self._fast = all("val" in n.meta for n in self.placeholders)
        self._last: Optional[_Entry] = None
        self._sym_sources: Optional[List[Tuple[int, Optional[int], str]]] = None
        self._lin_sources: Optional[List[Tuple[int, int, str, int, int]]] = None
        self._axes_of: Optional[Tuple[Any, list, list]] = None  # see _padded_axes
        self.static_only = False
        self.imported: Optional[importer.ImportResult] = None
        self.plan = bucketing.Plan(())
        # The graph llmc imports when the bucketing plan rewrites (appends,
        # key masks; see bucketing.rewrite) and the inputs it adds.
        self.bucket_gm: Optional[torch.fx.GraphModule] = None
        self.bucket_extras: List[bucketing.Extra] = []
        try:
            self.imported = importer.import_graph(eager, func_name=name, donate=self.donate)
            self._dump(self.imported.text, name)
        except importer.NeedsStatic as e:
            self.static_only = True
            report.notes.append(f"{name}: imported per concrete shape ({e})")
        except importer.Unsupported as e:
            self._disable(f"import failed: {e}")
        if self.disabled is None and options.dynamic_buckets != "none":
            self._plan_buckets()
        if options.strict and self.disabled is None:
            self._compile_ahead()

    def _compile_ahead(self):
        """strict: compiles the traced shape now, inside the backend call, so
        that a compile failure (or a missing libllmc.so) comes out of
        torch.compile as BackendCompilerFailed carrying llmc's diagnostic,
        as Inductor's failures do. Only for subgraphs whose inputs are all
        tensors of static shapes and that are not bucketed; the others
        compile on their first call (a failure then raises FallbackRefused
        from the call)."""
        args = [ph.meta.get("val") for ph in self.placeholders]
        if self.plan or not all(
                isinstance(a, torch.Tensor) and all(isinstance(d, int) for d in a.shape)
                for a in args):
            return
        ok, why = _capi.available()
        if not ok:
            self._disable(why)  # raises (strict)
        self._compile_entry(args)  # raises on failure (strict)

    def _compile_entry(self, args) -> Optional["_Entry"]:
        """Compiles the shapes of `args` and keeps the executable in
        self.sessions; on a compile or import failure, _disable (which
        raises under strict) and None."""
        try:
            exe, imp = self._compile(args)
        except _capi.LlmcError as e:
            self._disable(f"{e}\n  ops: {self._ops_summary()}\n  inputs: "
                          f"{_shape_str(args)}\n  hint: set LLMC_DUMP_DIR to see the "
                          "imported IR; the subgraph's output is PyTorch's")
            return None
        except importer.Unsupported as e:
            self._disable(f"import failed: {e}")
            return None
        entry = self.sessions[self._key(args)] = _Entry(exe, imp)
        return entry

    # -- helpers ----------------------------------------------------------------
    def _plan_buckets(self):
        syms = bucketing.dynamic_symbols(self.eager)
        if not syms:
            return
        try:
            self.plan = bucketing.analyze(self.eager)
        except Exception as e:  # a gap in the analysis must not break compilation
            self.plan = bucketing.Plan((), (), {"*": f"analysis error: {type(e).__name__}: {e}"})
        if self.plan.rewrites:
            self._rewrite_for_buckets()
        for sym in self.plan.syms:
            self.report.bucketing.setdefault(sym, {"buckets": set(), "lengths": set()})
        what = bucketing.describe_buckets(self.options.dynamic_buckets)
        if self.plan.syms:
            self.report.notes.append(
                f"{self.name}: {', '.join(self.plan.syms)} bucketed ({what})"
                + (f"; position inputs {list(self.plan.pos_inputs)} checked and continued"
                   if self.plan.pos_inputs else ""))
        for sym, why in self.plan.refused.items():
            self.report.notes.append(f"{self.name}: {sym} compiled per size (padding "
                                     f"not exact: {why})")

    def _rewrite_for_buckets(self):
        """Imports the rewritten graph of a plan with rewrites (appends, key
        masks, sizes as values, last-position slices: bucketing.rewrite); when it cannot be rewritten or imported, the
        plan's symbols are compiled per size."""
        try:
            gm, extras = bucketing.rewrite(self.eager, self.plan)
            try:
                imported = importer.import_graph(gm, func_name=self.name, donate=self.donate)
                self._dump(imported.text, f"{self.name}.bucketed")
            except (importer.NeedsStatic, importer.Unsupported) as e:
                # Per concrete shape; checked now at the traced sizes, so a
                # graph that cannot be imported keeps the plain one.
                imported = None
                hints = {str(k): v for k, v in bucketing._hints(gm).items()}
                importer.import_graph(gm, func_name=self.name, bindings=hints,
                                      donate=self.donate)
                self.report.notes.append(f"{self.name}: bucketed graph imported per "
                                         f"concrete shape ({e})")
        except Exception as e:  # a gap in the rewrite must not break compilation
            why = f"rewrite failed: {type(e).__name__}: {e}"
            self.plan = bucketing.Plan((), (), {sym: why for sym in self.plan.syms})
            return
        self.bucket_gm, self.bucket_extras = gm, extras
        self.imported = imported
        self.static_only = self.static_only or imported is None
        notes = []
        if self.plan.appends:
            notes.append(f"{len(self.plan.appends)} cat(s) along them as appends at the "
                         "real length")
        if self.plan.key_masks:
            notes.append(f"{len(self.plan.key_masks)} attention(s) with the padded keys "
                         "masked")
        if self.plan.value_uses:
            notes.append(f"{len(self.plan.value_uses)} size(s) used as values fed the real "
                         "length")
        if self.plan.tail_slices:
            notes.append(f"{len(self.plan.tail_slices)} slice(s) of the last positions "
                         "gathered at the real length")
        self.report.notes.append(f"{self.name}: {', '.join(notes)}")

    def _disable(self, why: str):
        self.report.compile_failures.append(f"{self.name}: {why}")
        if self.options.strict:  # not disabled: every call raises, none falls back
            raise FallbackRefused(f"llmc (strict): subgraph {self.name} of {self.report.graph} "
                                  f"cannot run in llmc: {why}")
        self.disabled = why
        warn_once(f"disable:{self.report.graph}:{self.name}",
                  f"llmc: subgraph {self.name} of {self.report.graph} runs in PyTorch: {why}")

    def _dump(self, text: str, stem: str):
        if not self.options.dump_dir:
            return
        d = Path(self.options.dump_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{self.report.graph}.{stem}.mlir").write_text(text)

    def _ops_summary(self) -> str:
        ops = {}
        for n in self.eager.graph.nodes:
            if n.op == "call_function":
                k = importer.op_name(n)
                ops[k] = ops.get(k, 0) + 1
        return ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()))

    def _symbol_sources(self) -> List[Tuple[int, Optional[int], str]]:
        """(placeholder, dimension or None for a SymInt placeholder, symbol)
        for every plain-symbol size of the placeholders, in order."""
        if self._sym_sources is None:
            src = []
            for pi, ph in enumerate(self.placeholders):
                m = ph.meta.get("val")
                if isinstance(m, torch.SymInt):
                    if getattr(m.node.expr, "is_Symbol", False):
                        src.append((pi, None, str(m.node.expr)))
                elif isinstance(m, torch.Tensor):
                    for di, d in enumerate(m.shape):
                        if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False):
                            src.append((pi, di, str(d.node.expr)))
            self._sym_sources = src
        return self._sym_sources

    def _symbol_values(self, args) -> Dict[str, int]:
        """Symbol name -> size, read from the actual inputs."""
        vals: Dict[str, int] = {}
        for pi, di, name in self._symbol_sources():
            if pi >= len(args):
                continue
            a = args[pi]
            if di is None:
                if isinstance(a, int):
                    vals[name] = a
            elif isinstance(a, torch.Tensor) and di < a.dim():
                vals[name] = int(a.shape[di])
        # Symbols that are no whole dimension of any input, only a*s + b of
        # one (a subgraph after a cat of x with itself sees [2*s]).
        for pi, di, name, k, c in self._linear_sources():
            if name in vals or pi >= len(args):
                continue
            a = args[pi]
            if isinstance(a, torch.Tensor) and di < a.dim() and (int(a.shape[di]) - c) % k == 0:
                vals[name] = (int(a.shape[di]) - c) // k
        return vals

    def _linear_sources(self) -> List[Tuple[int, int, str, int, int]]:
        """(placeholder, dimension, symbol, a, b) of dimensions a*s + b
        (importer.linear_size) that are not a plain symbol."""
        if self._lin_sources is None:
            self._lin_sources = [
                (pi, di) + lin
                for pi, ph in enumerate(self.placeholders)
                if isinstance(ph.meta.get("val"), torch.Tensor)
                for di, d in enumerate(ph.meta["val"].shape)
                if isinstance(d, torch.SymInt) and not getattr(d.node.expr, "is_Symbol", False)
                for lin in [importer.linear_size(d.node.expr)] if lin is not None]
        return self._lin_sources

    def _compile_import(self, args, static: bool = False) -> importer.ImportResult:
        """The IR to compile for the shapes of `args` (dynamic, or concrete)."""
        if self.static_only or static:
            syms = self._symbol_values(args)
            gm = self.bucket_gm if self.bucket_gm is not None else self.eager
            imp = importer.import_graph(gm, func_name=self.name, bindings=syms,
                                        donate=self.donate)
            shapes = "_".join(f"{k}{v}" for k, v in sorted(syms.items()))
            self._dump(imp.text, f"{self.name}.{shapes}")
            return imp
        return self.imported

    def _compile(self, args) -> Tuple[Any, importer.ImportResult]:
        """(executable, import) for the shapes of `args`; raises LlmcError."""
        started = time.perf_counter()
        imp = self._compile_import(args)
        bindings: Dict[str, int] = {}
        if not self.static_only:
            for nm, (ai, di) in imp.dim_bindings.items():
                bindings[nm] = int(args[imp.arg_placeholders[ai]].shape[di])
        try:
            exe = _compiler(self.options).compile(imp.text, imp.func_name, bindings)
        except _capi.LlmcError as e:
            if self.static_only or not imp.dynamic:
                raise
            # The compiler's shape specialization could not resolve the dynamic
            # IR: import this subgraph per concrete shape from now on.
            self.static_only = True
            self.report.notes.append(
                f"{self.name}: dynamic IR did not compile ({e.message.splitlines()[0]}); "
                "imported per concrete shape")
            return self._compile(args)
        self.report.compiles += 1
        stats: Dict[str, float] = dict(getattr(exe, "stats", lambda: None)() or {})
        stats["compile_s"] = time.perf_counter() - started
        self.report.executables[self.name] = stats
        # TORCH_LOGS=llmc: one line per compile; +llmc (debug): the IR too;
        # TORCH_TRACE: both as tlparse artifacts.
        where = f"{self.report.graph}.{self.name}"
        summary = (f"llmc: compiled {where} for {_shape_str(args)} in "
                   f"{stats['compile_s']:.2f} s: " +
                   ", ".join(f"{k} {v}" for k, v in stats.items() if k != "compile_s"))
        log.info("%s", summary)
        log.debug("llmc: IR of %s:\n%s", where, imp.text)
        _artifact(f"llmc_compile_{self.report.graph}_{self.name}", summary, self._compile_id)
        _artifact(f"llmc_ir_{self.report.graph}_{self.name}", imp.text, self._compile_id)
        return exe, imp

    def _key(self, args) -> Tuple:
        return tuple([(a.shape, a.dtype) if isinstance(a, torch.Tensor) else a
                      for a in args])

    # -- bucketing ----------------------------------------------------------------
    def _pad(self, args) -> Tuple[Optional[list], Dict[str, Tuple[int, int]]]:
        """(arguments padded to their buckets, {symbol: (real, bucket)}); the
        arguments themselves and {} when nothing is padded. A plan that
        rewrites adds its inputs (bucketing.extra_inputs) whether or not the
        call is padded; None when the call must run in PyTorch (symbols the
        plan needs related do not hold the relation (Plan.links), or a size
        the rewrite's inputs need cannot be read from the arguments)."""
        real = self._symbol_values(args)
        if any(real.get(a) != real.get(r, -1) + d for a, r, d in self.plan.links):
            return None, {}
        run_args, sizes = self._pad_inputs(args, real)
        if not self.bucket_extras:
            return run_args, sizes
        padded = self._symbol_values(run_args)
        if any(e.sym not in real or e.sym not in padded for e in self.bucket_extras):
            return None, {}
        dev = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda),
                   next((a.device for a in args if isinstance(a, torch.Tensor)), None))
        return run_args + bucketing.extra_inputs(self.bucket_extras, real, padded, dev), sizes

    def _pad_inputs(self, args, vals: Dict[str, int]) -> Tuple[list, Dict[str, Tuple[int, int]]]:
        """_pad without the inputs of the rewrites; `vals`: the symbols' real
        sizes (_symbol_values of `args`)."""
        if not self.plan:
            return list(args), {}
        sizes: Dict[str, Tuple[int, int]] = {}
        links = {a: (r, d) for a, r, d in self.plan.links}
        caps = dict(self.plan.size_limits)
        for sym in sorted(self.plan.syms, key=lambda x: x in links):  # linked ones last
            n = vals.get(sym)
            if sym in links:  # padded to its root's bucket + d (checked: n = root + d)
                r, d = links[sym]
                b = sizes[r][1] + d if r in sizes else None
            else:
                b = bucketing.bucket_size(n, self.options.dynamic_buckets) if n else None
                cap = caps.get(sym)
                if b is not None and cap is not None:
                    b = max(n, min(b, cap))  # in-graph positions index a table of cap rows
            if b is not None:
                sizes[sym] = (n, b)
                info = self.report.bucketing[sym]
                info["buckets"].add(b)
                info["lengths"].add(n)
        if not sizes or all(n == b for n, b in sizes.values()):
            return list(args), sizes
        # One read of the device for all position inputs (is_position each).
        in_axes = self._padded_axes()[0]
        checks = []
        for pi in self.plan.pos_inputs:
            axes = in_axes[pi]
            checks.append((args[pi], axes[0][0]) if len(axes) == 1 and axes[0][2] == 0
                          else None)
        offsets = bucketing.position_offsets([c for c in checks if c is not None])
        it = iter(offsets)
        cs = set()
        for pi, chk in zip(self.plan.pos_inputs, checks):
            c = next(it) if chk is not None else None
            if c is None:
                warn_once(f"pos:{self.report.graph}:{self.name}",
                          f"llmc: {self.name}: input {pi} is not arange(n)+c along its "
                          "dynamic dimension; such calls run unpadded")
                return list(args), {}
            cs.add(c)
        if self.plan.zero_pos and cs - {0}:
            warn_once(f"pos0:{self.report.graph}:{self.name}",
                      f"llmc: {self.name}: position inputs start at {sorted(cs)}, not 0, where "
                      "the graph compares them with its own positions; such calls run unpadded")
            return list(args), {}
        if len(cs) > 1:
            warn_once(f"posc:{self.report.graph}:{self.name}",
                      f"llmc: {self.name}: position inputs start at different offsets "
                      f"{sorted(cs)}; such calls run unpadded")
            return list(args), {}
        padded = []
        for pi, (ph, a) in enumerate(zip(self.placeholders, args)):
            m = ph.meta.get("val")
            if isinstance(a, torch.Tensor):
                axes = [(ax, sizes[s][1] + c) for ax, s, c in in_axes[pi] if s in sizes]
                if axes:
                    mode = ("position" if pi in self.plan.pos_inputs else
                            "mask" if pi in self.plan.mask_inputs else "edge")
                    a = bucketing.pad_tensor(a, axes, mode)
            elif isinstance(m, torch.SymInt) and isinstance(a, int):
                # A size (s, or s + c computed outside the subgraph) at the
                # padded sizes.
                e = m.node.expr
                sub = {x: sizes[str(x)][1] if str(x) in sizes else vals.get(str(x))
                       for x in e.free_symbols}
                if any(str(x) in sizes for x in sub) and all(v is not None for v in sub.values()):
                    a = int(e.xreplace(sub))
            padded.append(a)
        return padded, sizes

    def _padded_axes(self) -> Tuple[list, list]:
        """bucketing.padded_axes_of every placeholder and every output for the
        bucketed symbols of self.plan (made once per plan)."""
        if self._axes_of is None or self._axes_of[0] is not self.plan:
            syms = self.plan.syms
            self._axes_of = (self.plan,
                             [bucketing.padded_axes_of(ph.meta.get("val"), syms)
                              for ph in self.placeholders],
                             [bucketing.padded_axes_of(m, syms) for m in self.out_metas])
        return self._axes_of[1], self._axes_of[2]

    def _slice_outputs(self, outs, imp, sizes) -> list:
        """The function's results sliced back to the real sizes of the padded
        symbols (the padded axes of the FX output each result is)."""
        if not sizes:
            return list(outs)
        res = list(outs)
        out_axes = self._padded_axes()[1]
        done = set()
        for k, ((kind, i), m) in enumerate(zip(imp.outputs, self.out_metas)):
            if kind != "out" or i in done or not isinstance(m, torch.Tensor):
                continue
            done.add(i)
            o = res[i]
            for ax, sym, c in out_axes[k]:
                if sym in sizes:
                    o = o.narrow(ax, 0, sizes[sym][0] + c)
            res[i] = o
        return res

    def _restride(self, outs, imp, args) -> list:
        """Gives each result the strides PyTorch's would have (the FX metadata).

        AOTAutograd regenerates outputs that alias another output with
        as_strided on that base using eager's strides, and eager code after
        the subgraph may `view` a result: a contiguous llmc result (or a
        padded one sliced back) where PyTorch's is laid out otherwise would be
        read wrongly or fail. Results already laid out that way are kept."""
        res = list(outs)
        self._restride_plan(res, imp, args)
        return res

    def _restride_plan(self, res: list, imp, args) -> List[Tuple[int, Optional[Tuple[int, ...]]]]:
        """`_restride` in place on the list `res`; returns what it did as
        (result index, strides) actions in order (None strides: made
        contiguous). The results of one compiled shape (and one set of real
        sizes of its padded symbols) always come with the same shapes and
        strides, so the forward's fast path replays the actions
        (`_apply_restride`) instead of deciding again."""
        vals = None
        plan: List[Tuple[int, Optional[Tuple[int, ...]]]] = []
        for (kind, i), m in zip(imp.outputs, self.out_metas):
            if kind != "out" or not isinstance(m, torch.Tensor):
                continue
            o = res[i]
            if vals is None:
                vals = self._symbol_values(args)
            try:
                want = tuple(_concrete(st, vals) for st in m.stride())
            except (KeyError, TypeError, ValueError):
                want = None
            if want is not None and any(sz > 1 and st == 0 for sz, st in zip(o.shape, want)):
                want = None  # eager's is a broadcast view; ours holds the values
            if want is None:
                if not o.is_contiguous():
                    res[i] = o.contiguous()
                    plan.append((i, None))
                continue
            if all(sz <= 1 or a == b for sz, a, b in zip(o.shape, o.stride(), want)):
                continue
            t = torch.empty_strided(tuple(o.shape), want, dtype=o.dtype, device=o.device)
            t.copy_(o)
            res[i] = t
            plan.append((i, want))
        return plan

    # -- execution --------------------------------------------------------------
    def _unbucketed_call(self, args):
        """A call whose sizes break what the bucketing plan needs (_pad gave
        None): runs in PyTorch, announced once; strict raises."""
        why = ("a call's sizes break the relations its bucketing plan needs (linked "
               "symbols, or a size the plan's extra inputs read), so it runs in PyTorch")
        if self.options.strict:
            raise FallbackRefused(f"llmc (strict): subgraph {self.name} of {self.report.graph}: {why}")
        warn_once(f"unbucketed:{self.report.graph}:{self.name}",
                  f"llmc: subgraph {self.name} of {self.report.graph}: {why}")
        return self._eager(args)

    def _eager(self, args):
        self.report.eager_runs += 1
        return self.eager(*args)

    def forward(self, *args):
        # Under torch.profiler (or emit_nvtx) the call is a range named by the
        # graph and subgraph, so llmc's launches are attributed in traces;
        # otherwise one C call decides and nothing else is paid.
        if torch.autograd._profiler_enabled():
            with torch.profiler.record_function(f"llmc:{self.report.graph}:{self.name}"):
                return self._forward(args)
        return self._forward(args)

    def _forward(self, args):
        if self.disabled is not None:
            return self._eager(args)
        if self.options.check and self.updates:
            # The debug check reruns the subgraph in PyTorch on the inputs of
            # this call: keep the old values of the inputs llmc may update
            # in place (an optimizer step is not idempotent).
            self._pre_update = {a: args[a].detach().clone() for a in self.updates
                                if a < len(args) and isinstance(args[a], torch.Tensor)}
        if self.plan:
            run_args, sizes = self._pad(args)
            if run_args is None:
                return self._unbucketed_call(args)
        else:
            run_args, sizes = args, _NO_SIZES
        # Fast path: the compiled shape of the previous call, when this call's
        # llmc arguments match its session's signature (dtype, shape, GPU)
        # and its non-tensor arguments are the same (run_fast checks the
        # former and does nothing on a mismatch).
        entry = self._last
        if entry is not None and all(run_args[i] == v for i, v in entry.scalars):
            tensors = [run_args[i] for i in entry.args]
            for j in entry.lifted:
                tensors[j] = tensors[j].to(entry.session.device, non_blocking=True)
            for j, perm in entry.imp.arg_perms.items():
                tensors[j] = tensors[j].permute(perm)
            if entry.imp.rng_seed:
                tensors.append(_random_seed(entry.session.device))
            if not entry.imp.outputs:
                if self._matches(entry, tensors):
                    return self._finish(entry, [], sizes, args)
            else:
                outs = entry.session.run_fast(tensors)
                if outs is not None:
                    if self.copied_back_inputs:
                        self._moved_fixed_input(entry)
                    return self._finish(entry, outs, sizes, args)
        return self._forward_general(args, run_args, sizes)

    @staticmethod
    def _matches(entry: "_Entry", tensors) -> bool:
        """The signature check of run_fast, for a subgraph without results
        (never run)."""
        s = entry.session
        return len(tensors) == len(s._in_sig) and all(
            t.dtype is d and t.shape == sh and t.get_device() == s._device_index
            for t, (sh, d) in zip(tensors, s._in_sig))

    def _finish(self, entry: "_Entry", outs: list, sizes, args):
        """The subgraph's outputs from the session's results (sliced back,
        restrided, assembled)."""
        imp = entry.imp
        if imp.out_perms:
            # Results returned in memory order: PyTorch's strides as views.
            outs = list(outs)
            for i, perm in imp.out_perms.items():
                outs[i] = outs[i].permute(perm)
        if sizes:
            outs = self._slice_outputs(outs, imp, sizes)
            skey = tuple([n for n, _ in sizes.values()])
        else:
            skey = ()
        plan = entry.restride.get(skey)
        if plan is None:
            outs = list(outs)
            entry.restride[skey] = self._restride_plan(outs, imp, args)
        elif plan:
            outs = list(outs)
            _apply_restride(outs, plan)
        self.report.llmc_runs += 1
        result = assemble_outputs(imp, outs, args)
        if self.options.check:
            self._check(args, result, imp)
        return result[0] if imp.single_output else tuple(result)

    def _forward_general(self, args, run_args, sizes):
        """forward without the fast path: finds or compiles the shape's
        executable, checks the devices, creates the session."""
        key = self._key(run_args)
        entry = self.sessions.get(key)
        if entry is None:
            ok, why = _capi.available()
            if not ok:
                if self.options.strict:
                    raise FallbackRefused(f"llmc (strict): {why}")
                warn_once("nolib", f"llmc: {why}. Every llmc subgraph runs in PyTorch.")
                return self._eager(args)
            entry = self._compile_entry(run_args)
            if entry is None:
                return self._eager(args)
        exe, imp, session = entry.exe, entry.imp, entry.session
        tensors = [run_args[i] for i in imp.arg_placeholders]
        dev = next((t.device for t in tensors if t.is_cuda), None)
        lifted = []
        if dev is not None:
            # AOTAutograd can pass 0-dim CPU tensors (lifted scalars) next to
            # CUDA ones; PyTorch ops accept that mix, llmc needs device memory.
            lifted = [j for j, t in enumerate(tensors) if not t.is_cuda and t.dim() == 0]
            for j in lifted:
                tensors[j] = tensors[j].to(dev, non_blocking=True)
        # Permuted dense inputs in memory order (ImportResult.arg_perms):
        # contiguous views, unless this call's tensor is laid out otherwise
        # (then the session copies it).
        for j, perm in imp.arg_perms.items():
            tensors[j] = tensors[j].permute(perm)
        on_gpu = bool(tensors) and all(t.is_cuda for t in tensors)
        if on_gpu and imp.rng_seed:
            tensors.append(_random_seed(dev))
        if not on_gpu or not torch.cuda.is_available():
            warn_once("nogpu", "llmc: inputs are not on a CUDA GPU (or none is present): "
                               "llmc subgraphs are compiled but run in PyTorch.")
            return self._eager(args)
        if session is None:
            try:
                # Training graphs: the optimizer may change weights in ways
                # the version counters miss (.data): prepare on every call.
                training = not self.report.graph.endswith("_inference")
                every_call = self.options.prepare_parameters == "every_call"
                session = _capi.Session(exe, tensors[0].device.index or 0,
                                        cuda_graphs=self.options.cuda_graphs,
                                        always_prepare=training or every_call,
                                        staged_inputs=self._staged_inputs(exe, imp),
                                        staged_output_bytes=STAGE_BYTES,
                                        packed_outputs=self._packed_outputs(imp),
                                        output_views=self._output_views(imp),
                                        persistent_outputs=self._persistent_outputs(imp),
                                        fixed_inputs=self._fixed_inputs(imp))
            except _capi.LlmcError as e:
                self._disable(f"{e}")
                return self._eager(args)
            entry.session = session
        outs = session.run(tensors) if imp.outputs else []
        if self._fast and not any(isinstance(run_args[i], torch.Tensor)
                                  for i in self._scalar_args):
            entry.scalars = tuple((i, run_args[i]) for i in self._scalar_args)
            entry.lifted = lifted
            self._last = entry
        if self.copied_back_inputs:
            self._moved_fixed_input(entry)
        return self._finish(entry, outs, sizes, args)

    @staticmethod
    def _results_all_of_whose_outputs_are_in(imp, fx_outputs: set) -> List[int]:
        """The function results every FX output of which is in `fx_outputs`."""
        uses: Dict[int, List[int]] = {}
        for k, (kind, i) in enumerate(imp.outputs):
            if kind == "out":
                uses.setdefault(i, []).append(k)
        return sorted(i for i, ks in uses.items() if all(k in fx_outputs for k in ks))

    def _packed_outputs(self, imp) -> List[int]:
        """The function results every FX output of which is a tensor saved
        for the backward (self.saved): they live and die together, so the
        session allocates them in one piece."""
        return self._results_all_of_whose_outputs_are_in(imp, self.saved)

    def _persistent_outputs(self, imp) -> List[int]:
        """The function results every FX output of which is a copied-back
        mutation's new value (self.copied_back_outputs)."""
        return self._results_all_of_whose_outputs_are_in(imp, self.copied_back_outputs)

    def _fixed_inputs(self, imp) -> List[int]:
        """The executable inputs fed by copied-back mutated buffers, which
        _staged_inputs leaves unstaged on the assumption that they stay
        where they are (_capi.Session's fixed_inputs)."""
        if not self.options.cuda_graphs:
            return []
        return [k for k, p in enumerate(imp.arg_placeholders) if p in self.copied_back_inputs]

    def _moved_fixed_input(self, entry) -> None:
        """After a call: when a copied-back buffer moved since the previous
        call, stage such inputs from now on (a new session): a CUDA graph per
        address would be captured otherwise, until the runtime turns graphs
        off."""
        if entry.session is not None and getattr(entry.session, "fixed_input_moved", False):
            self.copied_back_inputs.clear()
            entry.session = None
            self._last = None
            self.report.notes.append(f"{self.name}: a mutated buffer moved between calls; "
                                     "its inputs are staged for the CUDA graphs from now on")

    def _output_views(self, imp) -> Dict[int, int]:
        """{function result: the result whose memory it shares}, from
        self.saved_views: both results in memory order (no out_perms), so
        the same elements in the same order."""
        views: Dict[int, int] = {}
        for k, r in self.saved_views.items():
            (ka, a), (kb, b) = imp.outputs[k], imp.outputs[r]
            if ka == kb == "out" and a != b and a not in imp.out_perms and b not in imp.out_perms:
                views[a] = b
        return views

    def _staged_inputs(self, exe, imp) -> List[int]:
        """The executable inputs a CUDA-graph session copies into its own
        buffers on every call (SessionOptions::staged_inputs): those not fed
        by a static input (a token, a position, an intermediate of PyTorch),
        not donated, not parameters, of at most STAGE_BYTES."""
        if not self.options.cuda_graphs or self.static is None:
            return []
        staged = []
        for k, (p, info) in enumerate(zip(imp.arg_placeholders, exe.inputs)):
            nbytes = math.prod(info.shape) * info.dtype.itemsize
            if (p not in self.static and p not in self.donate and not info.parameter
                    and p not in self.copied_back_inputs and nbytes <= STAGE_BYTES):
                staged.append(k)
        if imp.rng_seed:
            staged.append(len(imp.arg_placeholders))  # a fresh seed every call
        return staged

    # -- debug check ----------------------------------------------------------------
    def _check(self, args, result, imp):
        if imp.rng_seed:
            # Dropout: llmc's masks are not PyTorch's (another generator).
            warn_once(f"check-rng:{self.report.graph}:{self.name}",
                      f"llmc check: {self.report.graph} subgraph {self.name} draws random "
                      "numbers (dropout); its results are not compared with PyTorch's")
            return
        old = self._pre_update
        if old:
            args = [old.get(i, a) for i, a in enumerate(args)]
            self._pre_update = None
        want = self.eager(*args)
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        floats = [a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype.is_floating_point]
        for j, (got, ref) in enumerate(zip(result, want)):
            if not isinstance(got, torch.Tensor) or not isinstance(ref, torch.Tensor):
                continue
            if imp.outputs[j][0] == "empty":
                continue  # unspecified values on both sides
            tol = self.options.check_tol or max(
                [CHECK_TOL.get(d, 1e-4) for d in floats + ([ref.dtype] if ref.dtype.is_floating_point else [])]
                or [0.0])
            bad = compare_outputs(got, ref, tol)
            if bad is None:
                continue
            where = self._dump_case(args, imp, j)
            msg = (f"llmc check: {self.report.graph} (graph {self.report.kind}) subgraph "
                   f"#{self.index} {self.name}, output {j} {str(ref.dtype).replace('torch.', '')}"
                   f"{list(ref.shape)}: {bad} (tolerance {tol:.0e} relative L2)\n"
                   f"  reproduce: {where}")
            self.report.check_failures.append(msg)
            if self.options.check == "warn":
                warn_once(f"check:{self.report.graph}:{self.name}:{j}", msg)
            else:
                raise CheckMismatch(msg)

    def _dump_case(self, args, imp, j) -> str:
        """Writes the subgraph's IR (concrete shapes) and inputs; returns how to rerun it."""
        base = Path(self.options.dump_dir) if self.options.dump_dir else Path(
            tempfile.mkdtemp(prefix="llmc_check_"))
        d = base / f"{self.report.graph}.{self.name}.check"
        d.mkdir(parents=True, exist_ok=True)
        syms = self._symbol_values(args)
        try:
            text = importer.import_graph(self.eager, func_name=self.name, bindings=syms,
                                         donate=self.donate).text
        except Exception:
            text = imp.text
        (d / "f.mlir").write_text(text)
        cmd = ["llmc-run", str(d / "f.mlir"), "--check=ref"]
        for ai, pi in enumerate(imp.arg_placeholders):
            t = args[pi].detach()
            if ai in imp.arg_perms:
                t = t.permute(imp.arg_perms[ai])  # the argument in memory order
            t = t.cpu().contiguous()
            if t.dtype.is_floating_point:
                p = d / f"arg{ai}.f32"
                p.write_bytes(t.to(torch.float32).numpy().tobytes())
            else:
                p = d / f"arg{ai}.i64"
                p.write_bytes(t.to(torch.int64).numpy().tobytes())
            cmd.append(f"--input=arg{ai}={p}")
        torch.save({"args": [a.detach().cpu() if isinstance(a, torch.Tensor) else a
                             for a in args], "output": j}, d / "inputs.pt")
        (d / "cmd.txt").write_text(" ".join(cmd) + "\n")
        return " ".join(cmd)


def _concrete(d, vals: Dict[str, int]) -> int:
    """An int or SymInt with the symbols' values substituted."""
    if isinstance(d, torch.SymInt):
        e = d.node.expr
        e = e.xreplace({s: vals[str(s)] for s in e.free_symbols})
        return int(e)
    return int(d)


def _apply_restride(res: list, plan) -> None:
    """Replays a `LlmcSubgraph._restride_plan` on the list `res`."""
    for i, want in plan:
        o = res[i]
        if want is None:
            res[i] = o.contiguous()
        else:
            t = torch.empty_strided(tuple(o.shape), want, dtype=o.dtype, device=o.device)
            t.copy_(o)
            res[i] = t


def _random_seed(device) -> torch.Tensor:
    """A rank-0 int64 seed in [0, 2^53) for the subgraph's dropout masks,
    drawn from PyTorch's generator of `device` (so torch.manual_seed governs
    it); below 2^53 so that `llmc-run --value` replays it exactly."""
    return torch.randint(0, 2 ** 53, (), dtype=torch.int64, device=device)


def assemble_outputs(imp: importer.ImportResult, outs, args) -> list:
    """The FX subgraph's outputs from the function's results and its arguments.
    An output that is an argument passed through, or the same result twice,
    is returned as a fresh tensor: AOTAutograd's outputs must not alias inputs,
    nor each other unless the FX graph makes them views of one value (the
    saved reshapes that Session's output_views place at one address, as
    eager would)."""
    result, seen = [], set()
    device = None
    for kind, i in imp.outputs:
        if kind == "empty":
            # Unspecified values (an SDPA forward's unused RNG state), as
            # PyTorch's torch.empty, on the device of the other tensors.
            if device is None:
                device = next((t.device for t in list(outs) + list(args)
                               if isinstance(t, torch.Tensor)), None)
            result.append(torch.empty(i.shape, dtype=i.dtype, device=device))
            continue
        if kind == "out":
            t = outs[i]
            if i in seen:
                t = t.clone()
            seen.add(i)
            result.append(t)
        elif kind == "arg":
            result.append(args[i].clone())
        elif kind == "argview":
            # A permuting view of an input, as PyTorch returns it (no copy).
            j, perm = i
            result.append(args[j].permute(perm))
        elif kind == "argcopy":
            # A copy of an input's permuting view (clone keeps its strides).
            j, perm = i
            result.append(args[j].permute(perm).clone())
        else:
            result.append(None)
    return result


def compare_outputs(got: torch.Tensor, ref: torch.Tensor, tol: float) -> Optional[str]:
    """None when `got` matches `ref` (relative L2 <= tol; integers and booleans
    exactly; NaN/inf at the same places), else what differs."""
    if tuple(got.shape) != tuple(ref.shape):
        return f"shape {list(got.shape)} != {list(ref.shape)}"
    if got.dtype != ref.dtype:
        return f"dtype {got.dtype} != {ref.dtype}"
    g = got.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    gn, rn = torch.isnan(g), torch.isnan(r)
    if not torch.equal(gn, rn):
        return f"NaN at {int(gn.sum())} places, PyTorch {int(rn.sum())}"
    gi, ri = torch.isinf(g), torch.isinf(r)
    if not torch.equal(gi, ri) or not torch.equal(g[gi], r[ri]):
        return "inf at different places"
    fin = ~(rn | ri)
    g, r = g[fin], r[fin]
    if g.numel() == 0:
        return None
    diff = (g - r).abs()
    max_abs = float(diff.max())
    rel = diff / r.abs().clamp_min(1e-30)
    max_rel = float(rel.max())
    if not ref.dtype.is_floating_point:
        return None if max_abs == 0 else f"{int((diff != 0).sum())} values differ (max abs {max_abs:g})"
    den = float(r.norm())
    l2 = float((g - r).norm()) / (den if den > 0 else 1.0)
    if l2 <= tol:
        return None
    idx = int(diff.argmax())
    return (f"relative L2 error {l2:.3e}, max abs error {max_abs:.3e}, max rel error "
            f"{max_rel:.3e} (worst: {float(g[idx]):.6g} vs PyTorch {float(r[idx]):.6g})")


def _decompositions():
    from torch._decomp import core_aten_decompositions
    table = core_aten_decompositions()
    # Kept whole: they have llm ops of their own.
    for op in (torch.ops.aten.silu.default,
               torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default):
        table.pop(op, None)
    return table


def _mutated_inputs(kind: str) -> Tuple[List[int], int]:
    """(the inputs an inference graph mutates, by position; the number of
    inputs): buffers such as a static KV cache, whose new values AOTAutograd
    returns as the graph's first outputs, in this order, and copies back
    after the call (ViewAndMutationMeta.mutated_inp_runtime_indices).
    ([], 0) when unknown."""
    if kind != "inference":
        return [], 0
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    try:
        mutated = list(meta.mutated_inp_runtime_indices)
        if any(meta.input_info[i].mutates_metadata for i in mutated):
            return [], 0
        return mutated, len(meta.input_info)
    except (AttributeError, IndexError, TypeError):
        return [], 0


# With CUDA graphs, subgraph inputs and outputs of at most this many bytes
# that do not stay at fixed addresses are copied through buffers of the
# session (SessionOptions::staged_inputs / staged_output_bytes), so a decode
# step (new token, position and logits tensors on every call) replays one
# graph; larger ones stay in the graph key.
STAGE_BYTES = 1 << 20


def _static_inputs() -> Optional[set]:
    """The graph inputs PyTorch keeps at fixed addresses across calls
    (parameters, buffers, inputs marked static: AOTAutograd's
    ViewAndMutationMeta.static_input_indices, what its CUDA graph trees key
    on), or None when unknown."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    indices = getattr(meta, "static_input_indices", None)
    return None if indices is None else set(indices)


def _saved_outputs(fused: torch.fx.GraphModule, names, kind: str) -> Dict[str, set]:
    """{llmc subgraph: its output indices that are used only as tensors a
    training forward saves for its backward}: the graph's outputs from
    ViewAndMutationMeta.num_forward on (after the mutated inputs, the user's
    outputs, intermediate bases and the RNG offset). They are alive from
    the forward to the end of the backward, all of them: one allocation can
    hold them. {} for other graphs, when the metadata is unknown, and when
    the graph threads effect tokens: those outputs come first and are not
    counted in num_forward, so the boundary would be off by their number."""
    if kind != "forward":
        return {}
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    first = getattr(meta, "num_forward", None)
    if not isinstance(first, int) or getattr(meta, "tokens", None):
        return {}
    out_node = next(n for n in fused.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    positions: Dict[torch.fx.Node, List[int]] = {}
    for p, a in enumerate(outs if isinstance(outs, (tuple, list)) else [outs]):
        if isinstance(a, torch.fx.Node):
            positions.setdefault(a, []).append(p)
    found: Dict[str, set] = {}
    for call in fused.graph.nodes:
        if call.op != "call_module" or call.target not in names:
            continue
        found[call.target] = {
            user.args[1] for user in call.users
            if user.op == "call_function" and user.target is operator.getitem
            and isinstance(user.args[1], int) and list(user.users) == [out_node]
            and positions.get(user) and all(p >= first for p in positions[user])}
    return found


# Views that keep a value's elements in row-major order (a reshape of it).
_RESHAPES = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
             torch.ops.aten.reshape.default, torch.ops.aten.alias.default,
             torch.ops.aten.squeeze.default, torch.ops.aten.squeeze.dim,
             torch.ops.aten.squeeze.dims, torch.ops.aten.unsqueeze.default,
             torch.ops.aten.flatten.using_ints}


def _reshapes_of_one_value(gm: torch.fx.GraphModule, indices) -> Dict[int, int]:
    """{output index: the first output index} for the outputs among
    `indices` that are reshapes (_RESHAPES) of the same node as an earlier
    one: AOTAutograd saves one activation once per GEMM that reads it
    (q, k and v projections) as views of one value. In eager they share
    memory; llmc would copy each into its own output."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    first: Dict[torch.fx.Node, int] = {}
    views: Dict[int, int] = {}
    for k in sorted(indices):
        n = outs[k] if k < len(outs) else None
        if not isinstance(n, torch.fx.Node):
            continue
        while n.op == "call_function" and n.target in _RESHAPES and isinstance(n.args[0], torch.fx.Node):
            n = n.args[0]
        if n in first:
            views[k] = first[n]
        else:
            first[n] = k
    return views


def _static_placeholders(fused: torch.fx.GraphModule, names,
                         static: Optional[set]) -> Dict[str, set]:
    """{llmc subgraph: its placeholder indices fed by a static graph input}
    (see _static_inputs); every subgraph input is taken as static when that
    is unknown, so nothing is staged."""
    placeholders = [n for n in fused.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    found: Dict[str, set] = {}
    for call in fused.graph.nodes:
        if call.op != "call_module" or call.target not in names:
            continue
        found[call.target] = {a for a, arg in enumerate(call.args)
                              if static is None or (isinstance(arg, torch.fx.Node)
                                                    and index.get(arg) in static)}
    return found


_INDEX_PUTS = (torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default)


def _mutation_sites(fused: torch.fx.GraphModule, names, mutated_inputs: Tuple[List[int], int]):
    """(mutated input's FX placeholder, the llmc subgraph call computing its
    new value, that call's output index k, the FX output node) for every
    mutated input (see _mutated_inputs) whose new value is an output of an
    llmc subgraph; nothing when the graph's inputs are not the runtime's
    (effect tokens)."""
    mutated, num_inputs = mutated_inputs
    placeholders = [n for n in fused.graph.nodes if n.op == "placeholder"]
    outs = next(n for n in fused.graph.nodes if n.op == "output").args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    if len(placeholders) != num_inputs:
        return
    for j, i in enumerate(mutated):
        if j >= len(outs) or i >= len(placeholders) or not isinstance(outs[j], torch.fx.Node):
            continue
        new = outs[j]
        call, k = new, 0
        if new.op == "call_function" and new.target is operator.getitem:
            call, k = new.args
        if call.op == "call_module" and call.target in names:
            yield placeholders[i], call, k, new


def _only_the_mutation(call, k, new, out_node, outs) -> bool:
    """Whether the llmc subgraph call's output k (FX node `new`, directly or
    through getitem) is read only once, as the fused graph's output that
    AOTAutograd copies back into the mutated input."""
    readers = [u for u in call.users if u is new or (
        u.op == "call_function" and u.target is operator.getitem and u.args[1] == k)]
    return list(new.users) == [out_node] and outs.count(new) == 1 and readers == [new]


def _copied_back(fused: torch.fx.GraphModule, names, mutated_inputs: Tuple[List[int], int],
                 donations: Dict[str, Dict[int, int]],
                 updates: Dict[str, set]) -> Dict[str, Tuple[set, set]]:
    """{llmc subgraph: (its placeholders fed by a mutated input, its outputs
    that are only a mutated input's new value)} for the mutations that are
    not donated as KV caches (a counter's add_, HF's
    StaticLayer.cumulative_length: 32 per 7B decode step; inputs donated for
    an in-place update, `updates`, in case llmc computes them out of place):
    AOTAutograd copies such an output back into the
    input right after the call and drops it, so the session may reuse one
    tensor for it on every call (_capi.Session's persistent_outputs), and
    the input, a buffer that stays where it is, need not be staged for a
    CUDA graph."""
    found: Dict[str, Tuple[set, set]] = {}
    out_node = next(n for n in fused.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    for ph, call, k, new in _mutation_sites(fused, names, mutated_inputs):
        # Returned once, as the mutation's value only (a user's output that
        # is the same value would see the next call overwrite it).
        if not _only_the_mutation(call, k, new, out_node, outs):
            continue
        sub = call.target
        a = call.args.index(ph) if call.args.count(ph) == 1 else None
        # A KV cache written in place is not copied back; an input donated
        # for an in-place update is, when llmc computes it out of place
        # (the session's persistent outputs skip the ones it aliases).
        if a is not None and a in donations.get(sub, {}) and a not in updates.get(sub, ()):
            continue
        sub_ins, sub_outs = found.setdefault(sub, (set(), set()))
        if a is not None:
            sub_ins.add(a)
        sub_outs.add(k)
    return found


def _donations(fused: torch.fx.GraphModule, names, mutated_inputs: Tuple[List[int], int],
               updates: Optional[Dict[str, set]] = None) -> Dict[str, Dict[int, int]]:
    """{llmc subgraph: {placeholder index: output index}}: the mutated inputs
    (`mutated`, see _mutated_inputs) that only an llmc subgraph reads and
    whose new value it computes, as
    - an index_put without accumulate onto the input itself (a KV-cache
      write) that is the input's only reader: written in place;
    - any other value of the input's shape and dtype that is only the
      mutation's new value (an optimizer's update of a parameter or a
      moment, a counter's add_): llm.aliasing_output lets llmc write it
      over the input when the kernel computing it is the input's only
      reader and reads it elementwise (llmc::inPlaceResults), else it
      computes it out of place.
    The subgraph may then return the input tensor as that output (the
    executable's alias_input says so); AOTAutograd's copy-back is then a
    copy of a tensor onto itself, which PyTorch skips (and which still
    bumps the input's version counter, so prepared weights are renewed).
    Anything else keeps value semantics. `updates` (when given) gets the
    placeholders of the second kind, per subgraph."""
    found: Dict[str, Dict[int, int]] = {}
    out_node = next(n for n in fused.graph.nodes if n.op == "output")
    fused_outs = out_node.args[0]
    fused_outs = list(fused_outs) if isinstance(fused_outs, (tuple, list)) else [fused_outs]
    for ph, call, k, new in _mutation_sites(fused, names, mutated_inputs):
        if list(ph.users) != [call] or call.args.count(ph) != 1:
            continue
        sub = getattr(fused, call.target)
        a = call.args.index(ph)
        sub_phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
        sub_outs = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        single = not isinstance(sub_outs, (tuple, list))
        sub_outs = [sub_outs] if single else list(sub_outs)
        if (single and new is not call) or a >= len(sub_phs) or k >= len(sub_outs):
            continue
        v, base = sub_outs[k], sub_phs[a]
        if not (isinstance(v, torch.fx.Node) and v.op == "call_function" and v.target in _INDEX_PUTS
                and v.args[0] is base and list(base.users) == [v] and sub_outs.count(v) == 1):
            if _updated_elementwise(v, base, sub_outs, new, out_node, fused_outs, call, k):
                found.setdefault(call.target, {})[a] = k
                if updates is not None:
                    updates.setdefault(call.target, set()).add(a)
            continue
        # The base only as the base: an index_put whose indices or values
        # read it (index_copy_(0, perm, c)) reads what it overwrites.
        uses = []
        torch.fx.node.map_arg((v.args, v.kwargs), lambda n: uses.append(n))
        if uses.count(base) != 1:
            continue
        accumulate = v.args[3] if len(v.args) > 3 else v.kwargs.get("accumulate", False)
        m_in, m_out = importer._meta(base), importer._meta(v)
        if (accumulate or not isinstance(m_in, torch.Tensor) or not isinstance(m_out, torch.Tensor)
                or m_in.shape != m_out.shape or m_in.dtype != m_out.dtype):
            continue
        found.setdefault(call.target, {})[a] = k
    return found


def _updated_elementwise(v, base, sub_outs, new, out_node, fused_outs, call, k) -> bool:
    """Whether subgraph output k (`v`, FX node `new` of the fused graph) is
    a candidate for an in-place update of the subgraph input `base`: a
    pointwise op's value (torch.Tag.pointwise, or a foreach op's tensor) of
    base's shape and dtype,
    returned once and used only as
    the mutation's new value (a user output that is the same value would
    otherwise be the input tensor itself), with base a dense tensor that is
    not returned. llmc decides whether it can write it in place."""
    if not isinstance(v, torch.fx.Node) or v.op != "call_function" or sub_outs.count(v) != 1:
        return False
    # A pointwise op, or one tensor of a foreach op (pointwise per tensor).
    op = v.args[0].target if (v.target is operator.getitem and isinstance(v.args[0], torch.fx.Node)
                              and v.args[0].op == "call_function") else v.target
    schema = getattr(op, "_schema", None)
    if torch.Tag.pointwise not in getattr(op, "tags", ()) and not (
            schema is not None and schema.name.startswith("aten::_foreach_")):
        return False
    if base in sub_outs or not _only_the_mutation(call, k, new, out_node, fused_outs):
        return False
    m_in, m_out = importer._meta(base), importer._meta(v)
    return (isinstance(m_in, torch.Tensor) and isinstance(m_out, torch.Tensor)
            and m_in.shape == m_out.shape and m_in.dtype == m_out.dtype
            and m_in.is_contiguous() and m_out.is_contiguous())


def _compile_graph(gm: torch.fx.GraphModule, example_inputs, *, options: Options,
                   kind: str, causal_saved: Optional[Dict[str, tuple]] = None):
    from torch._functorch.aot_autograd import make_boxed_func
    name = f"g{next(_graph_ids)}_{kind}"
    mask_notes: List[str] = []
    folded = fold.fold_causal_masks(gm, mask_notes, causal_saved)
    fused, names, report = partition.partition(gm, name)
    report.kind = kind
    mutated = _mutated_inputs(kind)
    updates: Dict[str, set] = {}
    donations = _donations(fused, names, mutated, updates)
    static = _static_placeholders(fused, names, _static_inputs())
    saved = _saved_outputs(fused, names, kind)
    copied_back = _copied_back(fused, names, mutated, donations, updates)
    for sub, d in donations.items():
        caches = len(d) - len(updates.get(sub, ()))
        if caches:
            report.notes.append(f"{sub}: {caches} mutated input(s) (KV caches) donated: written in "
                                "place when llmc runs the subgraph")
        if updates.get(sub):
            report.notes.append(f"{sub}: {len(updates[sub])} mutated input(s) donated for an "
                                "in-place update (llm.aliasing_output): written in place where "
                                "llmc's kernel is their only reader")
    if folded:
        report.notes.append(f"{folded} constant causal attention mask(s) folded into is_causal")
    report.notes.extend(mask_notes)
    for i, sub in enumerate(names):
        eager = getattr(fused, sub)
        setattr(fused, sub, LlmcSubgraph(eager, sub, options, report, index=i,
                                         donate=donations.get(sub),
                                         updates=updates.get(sub),
                                         static=static.get(sub),
                                         saved=saved.get(sub),
                                         copied_back=copied_back.get(sub)))
    fused.recompile()
    _reports.append(report)
    log.info("%s", report)
    _artifact(f"llmc_partition_report_{name}", str(report))
    return make_boxed_func(fused.forward)


def _default_partition_after_cse(joint_module, joint_inputs, **kwargs):
    """PyTorch's default_partition after the CSE of the joint graph that its
    min-cut partitioner runs first (torch._functorch.compile_utils.fx_graph_cse).
    Without it, identical forward values (the three `view`s of one
    normalized activation that the q, k and v projections read) are saved
    as separate outputs, and the backward takes them as separate inputs
    that nothing proves equal: the forward writes each, and an fp8
    backward quantizes each (amax and a cast into cuBLASLt's layout) once
    per copy."""
    from torch._functorch import config, partitioners
    from torch._functorch.compile_utils import fx_graph_cse
    if config.cse:
        joint_module.graph = fx_graph_cse(joint_module.graph)
        joint_module.recompile()
    return partitioners.default_partition(joint_module, joint_inputs, **kwargs)


def _partition_fn(how: Optional[str] = None):
    """How AOTAutograd splits a training graph into forward and backward
    (the `partition` option; LLMC_PARTITION when None): `default` (PyTorch's default_partition after the
    joint graph's CSE, _default_partition_after_cse) saves every intermediate the backward reads, each once; `mincut` (the min-cut rematerialization
    Inductor uses) saves fewer, smaller tensors and recomputes cheap
    elementwise ops in the backward (on the 1B LLaMA step the forward's
    saved results fell from 48 to 27 GiB, measured before the default
    partition ran the CSE; its speed through llmc is not measured yet, so
    it is not the default)."""
    from torch._functorch import partitioners
    if how is None:
        how = os.environ.get("LLMC_PARTITION", "default")
    if how == "default":
        return _default_partition_after_cse
    if how == "mincut":
        return partitioners.min_cut_rematerialization_partition
    raise ValueError(f"LLMC_PARTITION={how!r}: expected 'default' or 'mincut'")


def llmc_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """torch.compile backend entry point (registered as "llmc")."""
    from torch._dynamo.backends.common import aot_autograd
    options = Options.from_dict(kwargs.get("options"))
    mode = kwargs.get("mode")
    if mode not in (None, "default", "reduce-overhead"):
        raise ValueError(f"llmc backend: mode={mode!r}: expected 'default' or 'reduce-overhead' "
                         "(CUDA graphs; options={'cuda_graphs': True} says the same)")
    if mode == "reduce-overhead":  # torch.compile allows mode or options, not both
        options.cuda_graphs = True
    # The forward records the constant masks it proved causal; a mask it
    # saves for the backward reaches the backward as an input of the same
    # name (AOTAutograd's partitioner keeps node names), folded there too.
    causal_saved: Dict[str, tuple] = {}
    fw = functools.partial(_compile_graph, options=options, kind="forward",
                           causal_saved=causal_saved)
    bw = functools.partial(_compile_graph, options=options, kind="backward",
                           causal_saved=causal_saved)
    inf = functools.partial(_compile_graph, options=options, kind="inference")
    return aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=inf,
                        partition_fn=_partition_fn(options.partition),
                        decompositions=_decompositions())(gm, example_inputs)
