"""The `llmc` torch.compile backend.

    torch.compile(model, backend="llmc", options={...})

As torch-mlir's dynamo backend does: AOTAutograd normalizes the Dynamo graph
(core ATen decompositions, functionalization; a forward and, for training, a
backward graph), each graph is partitioned (`partition.py`), every llmc
subgraph is imported (`importer.py`) and compiled through the C API
(`_capi.py`) per input shape, and a boxed callable is returned.

Fallbacks, each announced once with `warnings.warn`:
  * no libllmc.so with the C API: every subgraph runs in PyTorch;
  * compiling a subgraph fails (e.g. an op the CUDA codegen does not lower):
    that subgraph runs in PyTorch, the message names the op and shapes;
  * no GPU, or CPU inputs: the subgraph is still imported and compiled (NVRTC
    needs no GPU), then runs in PyTorch.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx

from . import _capi, importer, partition

log = logging.getLogger("llmc")

__all__ = ["llmc_backend", "last_report", "reports", "Options"]

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


def warn_once(key: str, message: str):
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


@dataclass
class Options:
    precision: Optional[str] = None
    cuda_graphs: bool = False
    bucket: Union[str, int] = "none"
    cache_dir: Optional[str] = None
    dump_dir: Optional[str] = None
    arch: Optional[str] = None

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
        if not (o.bucket in ("none", "pow2") or (isinstance(o.bucket, int) and o.bucket > 0)):
            raise ValueError(f"llmc: bucket must be 'none', 'pow2' or a positive int, "
                             f"got {o.bucket!r}")
        return o

    def compiler_options(self) -> Dict[str, Any]:
        opts: Dict[str, Any] = {}
        if self.arch:
            opts["arch"] = self.arch
        if self.cache_dir:
            opts["cache_dir"] = self.cache_dir
        if self.precision:
            opts["precision"] = self.precision
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


class LlmcSubgraph(torch.nn.Module):
    """One llmc subgraph: compiled per input shape, PyTorch as the fallback."""

    def __init__(self, eager: torch.fx.GraphModule, name: str, options: Options,
                 report: partition.Report):
        super().__init__()
        self.eager = eager
        self.name = name
        self.options = options
        self.report = report
        self.disabled: Optional[str] = None
        self.sessions: Dict[Tuple, Any] = {}
        self.compiled_shapes: set = set()
        self.placeholders = [n for n in eager.graph.nodes if n.op == "placeholder"]
        self.static_only = False
        self.imported: Optional[importer.ImportResult] = None
        try:
            self.imported = importer.import_graph(eager, func_name=name)
            self._dump(self.imported.text, name)
        except importer.NeedsStatic as e:
            self.static_only = True
            report.notes.append(f"{name}: imported per concrete shape ({e})")
        except importer.Unsupported as e:
            self._disable(f"import failed: {e}")

    # -- helpers ----------------------------------------------------------------
    def _disable(self, why: str):
        self.disabled = why
        self.report.compile_failures.append(f"{self.name}: {why}")
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

    def _symbol_values(self, args) -> Dict[str, int]:
        """Symbol name -> size, read from the actual inputs."""
        vals: Dict[str, int] = {}
        for ph, a in zip(self.placeholders, args):
            m = ph.meta.get("val")
            if isinstance(m, torch.SymInt) and isinstance(a, int):
                e = m.node.expr
                if getattr(e, "is_Symbol", False):
                    vals[str(e)] = a
            elif isinstance(m, torch.Tensor) and isinstance(a, torch.Tensor):
                for d, s in zip(m.shape, a.shape):
                    if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False):
                        vals[str(d.node.expr)] = int(s)
        return vals

    def _compile(self, args) -> Tuple[Any, importer.ImportResult]:
        """(executable, import) for the shapes of `args`; raises LlmcError."""
        if self.static_only:
            syms = self._symbol_values(args)
            imp = importer.import_graph(self.eager, func_name=self.name, bindings=syms)
            shapes = "_".join(f"{k}{v}" for k, v in sorted(syms.items()))
            self._dump(imp.text, f"{self.name}.{shapes}")
            bindings: Dict[str, int] = {}
        else:
            imp = self.imported
            bindings = {}
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
        return exe, imp

    def _key(self, args) -> Tuple:
        return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                     for a in args)

    # -- execution --------------------------------------------------------------
    def forward(self, *args):
        if self.disabled is not None:
            self.report.eager_runs += 1
            return self.eager(*args)
        key = self._key(args)
        entry = self.sessions.get(key)
        if entry is None:
            ok, why = _capi.available()
            if not ok:
                warn_once("nolib", f"llmc: {why}. Every llmc subgraph runs in PyTorch.")
                self.report.eager_runs += 1
                return self.eager(*args)
            try:
                exe, imp = self._compile(args)
            except _capi.LlmcError as e:
                self._disable(f"{e}\n  ops: {self._ops_summary()}\n  inputs: "
                              f"{_shape_str(args)}\n  hint: set LLMC_DUMP_DIR to see the "
                              "imported IR; the subgraph's output is PyTorch's")
                self.report.eager_runs += 1
                return self.eager(*args)
            except importer.Unsupported as e:
                self._disable(f"import failed: {e}")
                self.report.eager_runs += 1
                return self.eager(*args)
            entry = [exe, imp, None]
            self.sessions[key] = entry
        exe, imp, session = entry
        tensors = [args[i] for i in imp.arg_placeholders]
        on_gpu = bool(tensors) and all(t.is_cuda for t in tensors)
        if not on_gpu or not torch.cuda.is_available():
            warn_once("nogpu", "llmc: inputs are not on a CUDA GPU (or none is present): "
                               "llmc subgraphs are compiled but run in PyTorch.")
            self.report.eager_runs += 1
            return self.eager(*args)
        if session is None:
            try:
                session = _capi.Session(exe, tensors[0].device.index or 0,
                                        cuda_graphs=self.options.cuda_graphs)
            except _capi.LlmcError as e:
                self._disable(f"{e}")
                self.report.eager_runs += 1
                return self.eager(*args)
            entry[2] = session
        outs = session.run(tensors)
        self.report.llmc_runs += 1
        result = []
        for kind, i in imp.outputs:
            if kind == "out":
                result.append(outs[i])
            elif kind == "arg":
                result.append(args[i])
            else:
                result.append(None)
        return result[0] if imp.single_output else tuple(result)


def _decompositions():
    from torch._decomp import core_aten_decompositions
    table = core_aten_decompositions()
    # Kept whole: they have llm ops of their own.
    for op in (torch.ops.aten.silu.default,
               torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default):
        table.pop(op, None)
    return table


def _compile_graph(gm: torch.fx.GraphModule, example_inputs, *, options: Options,
                   kind: str):
    from torch._functorch.aot_autograd import make_boxed_func
    name = f"g{next(_graph_ids)}_{kind}"
    fused, names, report = partition.partition(gm, name)
    if options.bucket != "none":
        report.notes.append(
            f"bucket={options.bucket!r}: not applied (padding a dynamic dimension is not "
            "masked safely for every graph); each shape is compiled exactly")
    for sub in names:
        eager = getattr(fused, sub)
        setattr(fused, sub, LlmcSubgraph(eager, sub, options, report))
    fused.recompile()
    _reports.append(report)
    log.info("%s", report)
    return make_boxed_func(fused.forward)


def llmc_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """torch.compile backend entry point (registered as "llmc")."""
    from torch._dynamo.backends.common import aot_autograd
    options = Options.from_dict(kwargs.get("options"))
    fw = functools.partial(_compile_graph, options=options, kind="forward")
    bw = functools.partial(_compile_graph, options=options, kind="backward")
    inf = functools.partial(_compile_graph, options=options, kind="inference")
    return aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=inf,
                        decompositions=_decompositions())(gm, example_inputs)
