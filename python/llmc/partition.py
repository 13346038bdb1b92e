"""Splits an ATen FX graph into llmc subgraphs and the rest (PyTorch).

The operator support is exactly "the importer can translate this node"
(`importer.check_node`), plus a few shapes the CUDA code generator is known
not to lower (`_codegen_limit`), which are better left to PyTorch than
failing a whole subgraph's compilation. Nothing here raises for an
unsupported op: it stays in the graph as a PyTorch call.

The report counts the unsupported ops and the FLOPs (matmul and attention,
from the shapes) that llmc covers.
"""

from __future__ import annotations

import collections
import operator
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
from torch.fx.passes.operator_support import OperatorSupportBase

from . import importer

aten = torch.ops.aten

# Pure data movement: a partition neither starts nor ends with these.
_NON_COMPUTE = [
    "torch.ops.aten.view.default", "torch.ops.aten._unsafe_view.default",
    "torch.ops.aten.reshape.default", "torch.ops.aten.permute.default",
    "torch.ops.aten.transpose.int", "torch.ops.aten.t.default",
    "torch.ops.aten.unsqueeze.default", "torch.ops.aten.squeeze.dim",
    "torch.ops.aten.expand.default", "torch.ops.aten.clone.default",
    "torch.ops.aten.alias.default", "torch.ops.aten.detach.default",
    "torch.ops.aten.lift_fresh_copy.default", "torch.ops.aten.slice.Tensor",
]

# A single node is worth its own llmc subgraph only if it is one of these.
_SINGLE_NODE_OK = [
    "torch.ops.aten.mm.default", "torch.ops.aten.bmm.default",
    "torch.ops.aten.addmm.default", "torch.ops.aten.native_layer_norm.default",
    "torch.ops.aten._softmax.default",
    "torch.ops.aten._scaled_dot_product_flash_attention.default",
    "torch.ops.aten._scaled_dot_product_efficient_attention.default",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default",
    "torch.ops.aten._scaled_dot_product_cudnn_attention.default",
    "torch.ops.aten.embedding.default",
]


def _size_hint(d) -> int:
    if isinstance(d, torch.SymInt):
        hint = d.node.hint
        if hint is None:
            try:
                hint = d.node.shape_env.size_hint(d.node.expr)
            except Exception:
                hint = 1
        return int(hint)
    return int(d)


def node_flops(node: torch.fx.Node) -> int:
    """Matmul and attention FLOPs of `node` (2 per multiply-add), else 0."""
    if node.op != "call_function":
        return 0
    t = node.target
    try:
        if t in (aten.mm.default, aten.bmm.default, aten.addmm.default, aten.matmul.default):
            a = node.args[1] if t is aten.addmm.default else node.args[0]
            out = importer._meta(node)
            k = _size_hint(importer._meta(a).shape[-1])
            n = 1
            for d in out.shape:
                n *= _size_hint(d)
            return 2 * n * k
        if t in importer.MULTI_OUTPUT and "attention" in str(t) or t is aten.scaled_dot_product_attention.default:
            # Forward: two products over the scores; backward (grad_out
            # first): five, as FlashAttention-2's backward computes them.
            backward = str(t).endswith("_backward.default")
            first = 1 if backward else 0
            q, k = importer._meta(node.args[first]), importer._meta(node.args[first + 1])
            b, h, sq, d = (_size_hint(x) for x in q.shape)
            skv = _size_hint(k.shape[2])
            return (10 if backward else 4) * b * h * sq * skv * d
    except Exception:
        return 0
    return 0


def _adjacent_reduction(shape, dims) -> bool:
    """Whether the reduced `dims` of `shape` form one block once dimensions of
    size 1 are dropped: what the CUDA lowering takes (all dimensions, the
    trailing ones, or a block before the last; LowerReductions.cpp)."""
    runs = []  # reduced flags of the non-unit dimensions, runs merged
    for i, size in enumerate(shape):
        if not isinstance(size, torch.SymInt) and int(size) == 1:
            continue  # (a symbolic size may be 1 only where traced)
        reduced = i in dims
        if not runs or runs[-1] != reduced:
            runs.append(reduced)
    return runs.count(True) <= 1


def _gather_lowers(shape, axis: int) -> bool:
    """What the CUDA lowering of llm.gather takes (LowerDataMovement.cpp):
    dimensions of size 1 before `axis`, rank >= 2, rows that are not empty."""
    static = [not isinstance(d, torch.SymInt) for d in shape]
    if len(shape) < 2 or not all(static[:axis]) or any(int(d) != 1 for d in shape[:axis]):
        return False
    return all(isinstance(d, torch.SymInt) or int(d) > 0 for d in shape[axis + 1:])


def _codegen_limit(node: torch.fx.Node) -> Optional[str]:
    """Forms the importer translates but llmc's CUDA codegen does not lower."""
    t = node.target
    m = importer._meta(node)
    if t in (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default,
             aten.any.dims, aten.any.dim):
        x = importer._meta(node.args[0])
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if isinstance(dims, int):  # any.dim
            dims = [dims]
        if dims and isinstance(x, torch.Tensor):
            r = x.dim()
            dims = {d + r if d < 0 else d for d in dims}
            if not _adjacent_reduction(x.shape, dims):
                return "llmc codegen: reduction over dimensions that are not adjacent"
    if t in (aten.index_select.default, aten.index.Tensor):
        x = importer._meta(node.args[0])
        shape = list(x.shape)
        if t is aten.index_select.default:
            axis = node.args[1] + x.dim() if node.args[1] < 0 else node.args[1]
        else:
            # The importer gathers along the first indexed axis with the
            # indexed dimensions flattened, single elements as rows of one.
            where = [i for i, ix in enumerate(node.args[1]) if ix is not None]
            axis = where[0] if where else 0
            k = max(len(where), 1)
            sizes = shape[axis:axis + k]
            flat = 1 if any(isinstance(d, torch.SymInt) for d in sizes) else None
            if flat is None:
                flat = 1
                for d in sizes:
                    flat *= int(d)
            shape = shape[:axis] + [flat] + (shape[axis + k:] or [1])
        if not _gather_lowers(shape, axis):
            return ("llmc codegen: gather along an axis with a dimension of size > 1 "
                    "before it, or of single elements")
    if t is aten.argmax.default:
        x = importer._meta(node.args[0])
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return f"llmc codegen: argmax of {x.dtype} (f32, bf16, f16 are lowered)"
        if dim is not None and x.dim() > 0 and dim % x.dim() != x.dim() - 1:
            return "llmc codegen: argmax over a dimension other than the last"
    if t is aten.cumsum.default:
        x = importer._meta(node.args[0])
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if x.dim() > 0 and dim % x.dim() != x.dim() - 1:
            return "llmc codegen: cumsum over a dimension other than the last"
    if t is aten.embedding.default:
        w = importer._meta(node.args[0])
        if w.dim() != 2:
            return "llmc codegen: embedding table of rank other than 2"
    return None


class LlmcOperatorSupport(OperatorSupportBase):
    """Supported = the importer translates the node (and codegen lowers it)."""

    def __init__(self):
        self.reasons: Dict[torch.fx.Node, str] = {}
        self._supported: set = set()

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node in self.reasons:
            return False
        if node in self._supported:
            return True
        reason = importer.check_node(node)
        if reason is None:
            reason = _codegen_limit(node)
        if reason is None:
            self._supported.add(node)
            return True
        self.reasons[node] = reason
        return False


def _whole_graph_partition(gm: torch.fx.GraphModule, support: LlmcOperatorSupport):
    """The one partition of every call when all of them are supported (the
    usual case: a training step's forward and backward, a decode step), as
    CapabilityBasedPartitioner would find it for a connected graph, without
    its merging, which takes about a second on graphs of thousands of nodes
    (the 1B LLaMA's two graphs: 1.1 s, measured on the CPU). Disconnected parts become
    one subgraph too, which is valid: nothing outside it runs between them.
    None when a call is unsupported or the graph has too little to compute
    for a subgraph (the partitioner's single-node rule)."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if not all(support.is_node_supported(None, n) for n in calls):
        return None
    non_compute = set(_NON_COMPUTE) | {"torch.ops.aten.view", "_operator.getitem"}
    single_ok = set(_SINGLE_NODE_OK)
    compute = 0
    for n in calls:
        qualified = torch.fx.node._get_qualified_name(n.target)
        compute += (qualified not in non_compute) + (qualified in single_ok)
    if compute <= 1:
        return None
    return Partition(id=0, nodes=calls)


@dataclass
class Report:
    """What one FX graph became: llmc subgraphs, PyTorch ops, coverage."""

    graph: str = ""
    num_nodes: int = 0
    num_llmc_nodes: int = 0
    num_partitions: int = 0
    unsupported: Dict[str, int] = field(default_factory=dict)
    reasons: Dict[str, str] = field(default_factory=dict)
    flops_total: int = 0
    flops_llmc: int = 0
    compiles: int = 0
    compile_failures: List[str] = field(default_factory=list)
    eager_runs: int = 0
    llmc_runs: int = 0
    notes: List[str] = field(default_factory=list)
    kind: str = ""  # forward, backward or inference
    # Bucketed symbol -> {"buckets": sizes compiled for, "lengths": sizes seen}.
    bucketing: Dict[str, Dict[str, set]] = field(default_factory=dict)
    check_failures: List[str] = field(default_factory=list)
    # Subgraph name -> what its last compiled executable holds
    # (_capi.Executable.stats(): kernels, launches, GEMMs, ...) and
    # "compile_s", the seconds import + compile took.
    executables: Dict[str, Dict[str, float]] = field(default_factory=dict)

    @property
    def flops_fraction(self) -> float:
        return self.flops_llmc / self.flops_total if self.flops_total else 0.0

    @property
    def node_fraction(self) -> float:
        return self.num_llmc_nodes / self.num_nodes if self.num_nodes else 0.0

    def __str__(self) -> str:
        lines = [
            f"llmc partition report ({self.graph}): {self.num_llmc_nodes}/{self.num_nodes} "
            f"ATen ops in {self.num_partitions} llmc subgraph(s) "
            f"({100 * self.node_fraction:.1f}%); matmul/attention FLOPs covered: "
            f"{100 * self.flops_fraction:.1f}% of {self.flops_total:,}",
        ]
        if self.unsupported:
            lines.append("  kept in PyTorch:")
            for op, n in sorted(self.unsupported.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"    {n:4d} x {op}  ({self.reasons.get(op, '')})")
        lines.append(f"  compiles: {self.compiles}; llmc runs: {self.llmc_runs}; "
                     f"eager runs of llmc subgraphs: {self.eager_runs}")
        for name, st in sorted(self.executables.items()):
            if "kernels" in st:
                lines.append(
                    f"  {name}: {st['kernels']} kernels, {st['launches']} launches per call "
                    f"(+{st['prepare_launches']} once per parameter set), {st['gemms']} "
                    f"cuBLASLt GEMMs, {st['cudnn_attentions']} attention(s) cuDNN may run, "
                    f"arena {st['arena_bytes'] / 2**20:.1f} MiB; compiled in "
                    f"{st['compile_s']:.2f} s")
            else:
                lines.append(f"  {name}: compiled in {st['compile_s']:.2f} s")
        for sym, info in sorted(self.bucketing.items()):
            if info["lengths"]:
                b = sorted(info["buckets"])
                lines.append(f"  bucketing: {sym}: buckets {','.join(map(str, b))}; "
                             f"{len(b)} shape(s) compiled for {len(info['lengths'])} length(s)")
        for f in self.compile_failures:
            lines.append(f"  compile failure (ran in PyTorch): {f}")
        for f in self.check_failures:
            lines.append(f"  check failure: {f}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


def _is_tensor_op(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    m = importer._meta(node)
    if isinstance(m, torch.Tensor):
        return True
    return isinstance(m, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in m)


def partition(gm: torch.fx.GraphModule, name: str = "graph"
              ) -> Tuple[torch.fx.GraphModule, List[str], Report]:
    """Fuses supported nodes into `fused_<i>` submodules of a new GraphModule.

    Returns (graph module, names of the llmc submodules, report)."""
    support = LlmcOperatorSupport()
    report = Report(graph=name)
    tensor_ops = [n for n in gm.graph.nodes if _is_tensor_op(n)]
    report.num_nodes = len(tensor_ops)
    flops = {n: node_flops(n) for n in tensor_ops}
    report.flops_total = sum(flops.values())

    whole = _whole_graph_partition(gm, support)
    if whole is not None:
        partitions = [whole]
    else:  # (built only here: its dependency viewer is quadratic, 0.14 s at 2,400 nodes)
        partitions = CapabilityBasedPartitioner(
            gm, support, allows_single_node_partition=False,
            non_compute_ops=_NON_COMPUTE,
            allowed_single_node_partition_ops=_SINGLE_NODE_OK).propose_partitions()
    in_llmc = set()
    for p in partitions:
        in_llmc.update(p.nodes)
    for n in tensor_ops:
        if n in in_llmc:
            report.num_llmc_nodes += 1
            report.flops_llmc += flops[n]
        else:
            op = importer.op_name(n)
            report.unsupported[op] = report.unsupported.get(op, 0) + 1
            if op not in report.reasons:
                report.reasons[op] = support.reasons.get(
                    n, "supported, but alone or between unsupported ops")
    fused = fuse_by_partitions(gm, [p.nodes for p in partitions], prefix="llmc_") if partitions else gm
    names = [n.target for n in fused.graph.nodes
             if n.op == "call_module" and str(n.target).startswith("llmc_")]
    report.num_partitions = len(names)
    return fused, names, report
