"""FX (ATen) graph -> `llm` dialect text.

Input: a GraphModule after AOTAutograd with core ATen decompositions (every
node carries `meta["val"]`, a FakeTensor whose shape may hold SymInts).
Output: one `func.func` in the `llm` dialect's textual form.

Shapes: a dimension that is a SymInt becomes `?`; each function argument
with dynamic dimensions gets `llm.dim_names` naming them by their sympy
symbol (`s0`, ...), so the compiler specializes per shape binding. The `llm`
dialect cannot express a reshape with a dynamic input and two dynamic result
dimensions (e.g. [s0*s1, 64] -> [s0, s1, 64]); such a graph raises
`NeedsStatic` and the backend imports it again per concrete shape
(`bindings`), which it compiles per shape anyway.

Each ATen op has a handler; a handler raises `Unsupported` (never anything
else) for a form it cannot translate, which is how the partitioner asks
"can the importer translate this node" (`check_node`).

Peepholes that keep the IR close to what the compiler wants:
  mm(reshape(x:[..., K] -> [M, K]), w) -> reshape  =>  matmul(x, w) : [..., N]
  mm(x, transpose(w))                            =>  matmul(x, w) {transpose_rhs}
  reshape(reshape(x))                            =>  reshape(x)  (or x)
"""

from __future__ import annotations

import math
import operator
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import sympy
import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims


class Unsupported(Exception):
    """The node has no translation (the message says why)."""


class NeedsStatic(Exception):
    """The graph is only expressible with concrete shapes."""


MLIR_DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "f8E4M3FN",
    torch.float8_e5m2: "f8E5M2",
    torch.bool: "i1",
    torch.int8: "i8",
    torch.int32: "i32",
    torch.int64: "i64",
}
FLOAT_DTYPES = {torch.float32, torch.float16, torch.bfloat16,
                torch.float8_e4m3fn, torch.float8_e5m2}

Dim = Union[int, sympy.Expr]


def _dtype_str(dt: torch.dtype) -> str:
    s = MLIR_DTYPES.get(dt)
    if s is None:
        raise Unsupported(f"element type {dt} has no llm equivalent")
    return s


def dims_of(fake, bindings: Optional[Dict[str, int]] = None) -> Tuple[Dim, ...]:
    out = []
    for d in fake.shape:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if bindings is not None:
                expr = expr.xreplace({s: sympy.Integer(bindings[str(s)])
                                      for s in expr.free_symbols if str(s) in bindings})
            if isinstance(expr, sympy.Integer) or getattr(expr, "is_Integer", False):
                out.append(int(expr))
            elif bindings is not None and not expr.free_symbols:
                out.append(int(expr))
            else:
                out.append(expr)
        else:
            out.append(int(d))
    return tuple(out)


def _is_static(d: Dim) -> bool:
    return isinstance(d, int)


def _same_dim(a: Dim, b: Dim) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int):
        return False
    return sympy.simplify(a - b) == 0


def _may_match(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """Same rank, and no pair of static sizes differs (a symbolic size may
    equal anything: the verifier's rule)."""
    return len(a) == len(b) and all(
        not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a, b))


def _same_shape(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    return len(a) == len(b) and all(_same_dim(x, y) for x, y in zip(a, b))


def _prod(dims: Sequence[Dim]) -> Dim:
    p: Any = 1
    for d in dims:
        p = p * d
    if isinstance(p, int):
        return p
    p = sympy.expand(p)
    return int(p) if p.is_Integer else p


def tensor_type(shape: Sequence[Dim], dtype: torch.dtype) -> str:
    dims = "".join(("?" if not _is_static(d) else str(d)) + "x" for d in shape)
    return f"tensor<{dims}{_dtype_str(dtype)}>"


def f64_literal(v: float) -> str:
    """A finite float as MLIR accepts it (`1.0e-06`, not `1e-06`)."""
    s = repr(float(v))
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


def _float_literal(v: float, dtype: torch.dtype) -> str:
    if math.isfinite(v) and abs(v) <= 6.0e4:
        return f64_literal(v)
    # Non-finite or beyond f16's range: the exact bits of torch's rounding.
    t = torch.tensor(v, dtype=dtype)
    if dtype == torch.float32:
        bits = t.view(torch.int32).item() & 0xFFFFFFFF
        return f"0x{bits:08X}"
    if dtype in (torch.float16, torch.bfloat16):
        bits = t.view(torch.int16).item() & 0xFFFF
        return f"0x{bits:04X}"
    bits = t.view(torch.uint8).item()
    return f"0x{bits:02X}"


def _literal(v, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if v else "false"
    if dtype in FLOAT_DTYPES:
        return _float_literal(float(v), dtype)
    return str(int(v))


@dataclass(eq=False)
class Val:
    """An SSA value: emitted (`name`) or pending (`thunk` emits it on first use)."""

    shape: Tuple[Dim, ...]
    dtype: torch.dtype
    name: Optional[str] = None
    thunk: Optional[Callable[[], str]] = None
    reshape_base: Optional["Val"] = None   # this = reshape(reshape_base)
    transpose_of: Optional[Tuple["Val", Tuple[int, ...]]] = None
    is_arg: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)


@dataclass
class ImportResult:
    text: str
    func_name: str
    # For each function argument: index into the subgraph's placeholders.
    arg_placeholders: List[int]
    # dim name -> (argument index, dimension) to bind it from the inputs.
    dim_bindings: Dict[str, Tuple[int, int]]
    # For each FX output: ("out", i) = the i-th function result,
    # ("arg", j) = placeholder j passed through (a copy), ("argcopy",
    # (j, perm)) = a copy of placeholder j's `permute(perm)`, ("argview",
    # (j, perm)) = placeholder j's view `permute(perm)` (a transposed weight
    # saved for the backward: PyTorch's view, not a copy), ("none", None),
    # ("empty", Uninitialized) = a torch.empty the backend allocates.
    outputs: List[Tuple[str, Optional[int]]]
    dynamic: bool
    ops: Dict[str, int] = field(default_factory=dict)
    # The FX graph returns one value, not a tuple: the compiled callable must
    # return the same structure as the eager subgraph.
    single_output: bool = False
    # The function takes a last argument `%rng_seed` (rank-0 i64, dropout)
    # that no placeholder feeds: a fresh random value per call.
    rng_seed: bool = False
    # Argument index -> perm for the arguments whose placeholder is laid out
    # in another dimension order (dense_permutation): the function takes
    # the tensor in memory order, `input.permute(perm)`, so no copy is made.
    arg_perms: Dict[int, Tuple[int, ...]] = field(default_factory=dict)
    # Result index -> perm for the results PyTorch lays out in another
    # dimension order: the function returns them in memory order and the
    # FX output is `result.permute(perm)`, a view with PyTorch's strides.
    out_perms: Dict[int, Tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Uninitialized:
    """An output whose values PyTorch leaves unspecified (torch.empty): the
    RNG state an SDPA forward without dropout returns for its backward,
    which never reads it. llmc computes nothing for it; the backend returns
    a torch.empty of this static shape and dtype (any dtype, uint64 too).
    An llm op cannot read it (Importer.val refuses it)."""
    shape: Tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Unreadable:
    """An input tensor of a type llm has no equivalent for (the uint64 RNG
    state a flash-attention backward receives and ignores without dropout):
    not an argument of the imported function; an op that reads it is
    Unsupported (Importer.val)."""
    reason: str


def bind_args(node: torch.fx.Node) -> Dict[str, Any]:
    """Names an ATen call's arguments by its schema (defaults filled in)."""
    schema = node.target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _meta(n) -> Any:
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _norm_dim(d: int, rank: int) -> int:
    if d < 0:
        d += rank
    if not 0 <= d < max(rank, 1):
        raise Unsupported(f"dimension {d} out of range for rank {rank}")
    return d


# ---------------------------------------------------------------------------


class Importer:
    """Translates the call_function nodes of one FX graph into `llm` ops."""

    def __init__(self, bindings: Optional[Dict[str, int]] = None,
                 gm: Optional[torch.fx.GraphModule] = None):
        self.bindings = bindings
        self.gm = gm
        # The graph whose placeholders' whole-dimension symbols (or SymInt
        # inputs) the backend binds per concrete shape (bare_symbols, found
        # when a symbolic size first needs them).
        self._symbols_graph: Optional[torch.fx.Graph] = gm.graph if gm is not None else None
        self._bare_symbols: Optional[set] = None
        self.lines: List[str] = []
        self.env: Dict[torch.fx.Node, Any] = {}
        self.counter = 0
        self.loc = ""
        self.ops: Dict[str, int] = {}
        # The random seed argument (dropout), made on first use; one stream
        # per dropout site.
        self.seed: Optional[Val] = None
        self.rng_streams = 0

    def bare_symbols(self) -> Optional[set]:
        """bare_symbols of the graph being imported (computed once); None
        without one."""
        if self._bare_symbols is None and self._symbols_graph is not None:
            self._bare_symbols = bare_symbols(self._symbols_graph)
        return self._bare_symbols

    def rng_seed(self) -> Val:
        """The function's rank-0 i64 `%rng_seed` argument, after the
        placeholders' (ImportResult.rng_seed): the backend passes a fresh
        seed from PyTorch's generator on every call."""
        if self.seed is None:
            self.seed = Val((), torch.int64, name="%rng_seed")
        return self.seed

    # -- emission helpers ---------------------------------------------------
    def fresh(self) -> str:
        self.counter += 1
        return f"%{self.counter - 1}"

    def emit(self, op: str, rest: str) -> str:
        name = self.fresh()
        self.lines.append(f"    {name} = {op} {rest}{self.loc}")
        self.ops[op] = self.ops.get(op, 0) + 1
        return name

    def ref(self, v: Val) -> str:
        if v.name is None:
            v.name = v.thunk()
            v.thunk = None
        return v.name

    def new(self, shape, dtype, op: str, rest: Callable[[], str], **kw) -> Val:
        """A pending value: `op rest()` is emitted when first used."""
        v = Val(tuple(shape), dtype, **kw)
        loc = self.loc

        def thunk():
            saved, self.loc = self.loc, loc
            try:
                return self.emit(op, rest())
            finally:
                self.loc = saved
        v.thunk = thunk
        return v

    def new_results(self, results, op: str, rest: Callable[[], str]) -> List[Val]:
        """Pending values of one op with several results, one per
        (shape, dtype) of `results`: `%N:n = op rest()` is emitted once,
        when the first of them is used, and value i is `%N#i`."""
        loc = self.loc
        emitted: List[str] = []

        def emit_once() -> str:
            if not emitted:
                saved, self.loc = self.loc, loc
                try:
                    text = rest()
                    name = self.fresh()
                    self.lines.append(f"    {name}:{len(results)} = {op} {text}{self.loc}")
                    self.ops[op] = self.ops.get(op, 0) + 1
                finally:
                    self.loc = saved
                emitted.append(name)
            return emitted[0]

        vals = []
        for i, (shape, dtype) in enumerate(results):
            v = Val(tuple(shape), dtype)
            v.thunk = lambda i=i: f"{emit_once()}#{i}"
            vals.append(v)
        return vals

    def dims(self, fake) -> Tuple[Dim, ...]:
        return dims_of(fake, self.bindings)

    def out_meta(self, node) -> Tuple[Tuple[Dim, ...], torch.dtype]:
        m = _meta(node)
        if isinstance(m, (tuple, list)):
            m = m[0]
        if not isinstance(m, torch.Tensor):
            raise Unsupported("result is not a tensor")
        _dtype_str(m.dtype)
        return self.dims(m), m.dtype

    # -- value builders -----------------------------------------------------
    def constant(self, value, dtype: torch.dtype, shape=()) -> Val:
        if any(not _is_static(d) for d in shape):
            raise Unsupported("constant of a dynamic shape")
        ty = tensor_type(shape, dtype)
        lit = _literal(value, dtype)
        return self.new(shape, dtype, "llm.constant", lambda: f"dense<{lit}> : {ty}")

    def cast(self, v: Val, dtype: torch.dtype) -> Val:
        if v.dtype == dtype:
            return v
        _dtype_str(dtype)
        return self.new(v.shape, dtype, "llm.cast",
                        lambda: f"{self.ref(v)} : {v.type} to {tensor_type(v.shape, dtype)}")

    def broadcast(self, v: Val, shape) -> Val:
        shape = tuple(shape)
        if _same_shape(v.shape, shape):
            return v
        if v.rank > len(shape):
            raise Unsupported("broadcast to a lower rank")
        lead = len(shape) - v.rank
        for i, d in enumerate(v.shape):
            if not (d == 1 or _same_dim(d, shape[lead + i])):
                raise Unsupported(f"cannot broadcast {list(v.shape)} to {list(shape)}")
        ty = tensor_type(shape, v.dtype)
        return self.new(shape, v.dtype, "llm.broadcast",
                        lambda: f"{self.ref(v)} : {v.type} to {ty}")

    def reshape(self, v: Val, shape) -> Val:
        shape = tuple(shape)
        base = v.reshape_base or v
        if _same_shape(base.shape, shape):
            return base
        if _same_shape(v.shape, shape):
            return v
        dyn_out = sum(not _is_static(d) for d in shape)
        if any(not _is_static(d) for d in base.shape) and dyn_out > 1:
            raise NeedsStatic(f"reshape {list(base.shape)} -> {list(shape)} has "
                              "several dynamic result dimensions")
        ty = tensor_type(shape, v.dtype)
        return self.new(shape, v.dtype, "llm.reshape",
                        lambda: f"{self.ref(base)} : {base.type} to {ty}",
                        reshape_base=base)

    def transpose(self, v: Val, perm: Sequence[int]) -> Val:
        perm = tuple(perm)
        if perm == tuple(range(v.rank)):
            return v
        if v.transpose_of is not None:
            src, p0 = v.transpose_of
            composed = tuple(p0[i] for i in perm)
            return self.transpose(src, composed)
        shape = tuple(v.shape[i] for i in perm)
        plist = ", ".join(str(p) for p in perm)
        return self.new(shape, v.dtype, "llm.transpose",
                        lambda: f"{self.ref(v)} [{plist}] : {v.type}",
                        transpose_of=(v, perm))

    def operand(self, a, dtype: torch.dtype, shape) -> Val:
        """A tensor node or Python scalar as a value of `dtype` and `shape`."""
        if isinstance(a, Val):
            return self.broadcast(self.cast(a, dtype), shape)
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            if not isinstance(v, Val):
                if isinstance(a.meta.get("val"), torch.SymInt):
                    # A size used as a value (Hugging Face's cache_position =
                    # arange(1) + past length): a constant per concrete shape.
                    n = _static_int(a, f"operand {a.name}", self)
                    return self.broadcast(self.constant(n, dtype), shape)
                raise Unsupported(f"operand {a.name} is not an imported tensor")
            return self.broadcast(self.cast(v, dtype), shape)
        if isinstance(a, (bool, int, float)):
            return self.broadcast(self.constant(a, dtype), shape)
        raise Unsupported(f"operand of kind {type(a).__name__}")

    def val(self, a) -> Val:
        v = self.env.get(a) if isinstance(a, torch.fx.Node) else None
        if isinstance(v, Unreadable):
            raise Unsupported(f"operand {a}: {v.reason}")
        if not isinstance(v, Val):
            raise Unsupported(f"operand {a} is not an imported tensor")
        return v

    # -- the graph ----------------------------------------------------------
    def run_node(self, node: torch.fx.Node):
        if node.target is operator.getitem:
            src = self.env.get(node.args[0])
            if not isinstance(src, (list, tuple)) or not isinstance(node.args[1], int):
                raise Unsupported("getitem of a non-tuple")
            v = src[node.args[1]]
            if v is None and node.users:
                raise Unsupported(f"output {node.args[1]} of {node.args[0].name} is not produced")
            return v
        handler = HANDLERS.get(node.target)
        if handler is None:
            packet = getattr(node.target, "overloadpacket", None)
            handler = HANDLERS.get(packet) if packet is not None else None
        if handler is None:
            raise Unsupported(f"no translation for {op_name(node)}")
        self.loc = f' loc("{node.name}")'
        try:
            return handler(self, node)
        finally:
            self.loc = ""


def op_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}.{t._schema.name.split('::')[-1]}.{t._overloadname}"
    return getattr(t, "__name__", str(t))


# ---------------------------------------------------------------------------
# Handlers

HANDLERS: Dict[Any, Callable[[Importer, torch.fx.Node], Any]] = {}


def handles(*targets):
    def deco(fn):
        for t in targets:
            HANDLERS[t] = fn
        return fn
    return deco


_BINARY = {
    aten.add: "llm.add", aten.sub: "llm.sub", aten.mul: "llm.mul",
    aten.div: "llm.div", aten.pow: "llm.pow", aten.maximum: "llm.maximum",
    aten.minimum: "llm.minimum",
}


def _binary(imp: Importer, node, op: str, lhs, rhs) -> Val:
    shape, dtype = imp.out_meta(node)
    if op == "llm.pow" and dtype not in FLOAT_DTYPES:
        raise Unsupported("integer pow")
    if op != "llm.pow" and dtype == torch.bool:
        raise Unsupported(f"{op} on booleans")
    a = imp.operand(lhs, dtype, shape)
    b = imp.operand(rhs, dtype, shape)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, op, lambda: f"{imp.ref(a)}, {imp.ref(b)} : {ty}")


@handles(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
         aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
         aten.maximum.default, aten.minimum.default, aten.pow.Tensor_Tensor,
         aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _h_binary(imp, node):
    op = _BINARY[node.target.overloadpacket]
    args = bind_args(node)
    names = list(args)
    lhs, rhs = args[names[0]], args[names[1]]
    if node.target.overloadpacket is aten.div and args.get("rounding_mode"):
        raise Unsupported("div with a rounding mode")
    alpha = args.get("alpha", 1)
    if alpha is not None and alpha != 1:
        if not isinstance(alpha, (int, float)):
            raise Unsupported("symbolic alpha")
        if isinstance(rhs, torch.fx.Node):
            shape, dtype = imp.out_meta(node)
            r = imp.operand(rhs, dtype, shape)
            c = imp.operand(alpha, dtype, shape)
            ty = tensor_type(shape, dtype)
            rhs = imp.new(shape, dtype, "llm.mul",
                          lambda: f"{imp.ref(r)}, {imp.ref(c)} : {ty}")
        else:
            rhs = rhs * alpha
    return _binary(imp, node, op, lhs, rhs)


@handles(aten.rsub.Scalar, aten.rsub.Tensor)
def _h_rsub(imp, node):
    args = bind_args(node)
    if args.get("alpha", 1) != 1:
        raise Unsupported("rsub with alpha")
    return _binary(imp, node, "llm.sub", args["other"], args["self"])


@handles(aten.reciprocal.default)
def _h_reciprocal(imp, node):
    return _binary(imp, node, "llm.div", 1.0, node.args[0])


@handles(aten.clamp_min.default, aten.clamp_max.default, aten.clamp.default)
def _h_clamp(imp, node):
    args = bind_args(node)
    x = node.args[0]
    if node.target is aten.clamp_min.default:
        lo, hi = args["min"], None
    elif node.target is aten.clamp_max.default:
        lo, hi = None, args["max"]
    else:
        lo, hi = args["min"], args["max"]
    shape, dtype = imp.out_meta(node)
    cur = imp.operand(x, dtype, shape)
    ty = tensor_type(shape, dtype)
    for bound, op in ((lo, "llm.maximum"), (hi, "llm.minimum")):
        if bound is None:
            continue
        if not isinstance(bound, (int, float)):
            raise Unsupported("clamp with a tensor or symbolic bound")
        c = imp.operand(bound, dtype, shape)
        prev = cur
        cur = imp.new(shape, dtype, op,
                      lambda prev=prev, c=c: f"{imp.ref(prev)}, {imp.ref(c)} : {ty}")
    return cur


_UNARY = {
    aten.neg.default: ("llm.neg", False), aten.abs.default: ("llm.abs", False),
    aten.exp.default: ("llm.exp", True), aten.log.default: ("llm.log", True),
    aten.tanh.default: ("llm.tanh", True), aten.sqrt.default: ("llm.sqrt", True),
    aten.sin.default: ("llm.sin", True), aten.cos.default: ("llm.cos", True),
    aten.rsqrt.default: ("llm.rsqrt", True), aten.sigmoid.default: ("llm.sigmoid", True),
    aten.silu.default: ("llm.silu", True), aten.relu.default: ("llm.relu", False),
}


@handles(*_UNARY)
def _h_unary(imp, node):
    op, float_only = _UNARY[node.target]
    shape, dtype = imp.out_meta(node)
    if float_only and dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{op} on {dtype}")
    if dtype == torch.bool:
        raise Unsupported(f"{op} on booleans")
    x = imp.operand(node.args[0], dtype, shape)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, op, lambda: f"{imp.ref(x)} : {ty}")


# A static arange becomes a dense constant of at most this many elements
# (position ids and RoPE tables: one per sequence position).
ARANGE_MAX_ELEMENTS = 1 << 16


@handles(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _h_arange(imp, node):
    """torch.arange with static bounds -> `llm.constant dense<[...]>`.

    The values are torch.arange's own (computed here on the CPU), printed
    exactly as other literals of the result dtype. Symbolic bounds (dynamic
    shapes) have no translation: the range would depend on a run-time size."""
    args = bind_args(node)
    start = args.get("start", 0)
    end, step = args["end"], args.get("step", 1)
    start = 0 if start is None else start
    step = 1 if step is None else step
    bounds = {}
    for name, b in (("start", start), ("end", end), ("step", step)):
        if isinstance(b, (torch.fx.Node, torch.SymInt)):
            # A size of the graph (Hugging Face's key positions arange(cache
            # length)): imported per concrete shape.
            b = _static_int(b, f"arange {name} (dynamic shape)", imp)
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise Unsupported(f"arange with a {type(b).__name__} {name}")
        bounds[name] = b
    start, end, step = bounds["start"], bounds["end"], bounds["step"]
    shape, dtype = imp.out_meta(node)
    if dtype == torch.bool or len(shape) != 1 or not _is_static(shape[0]):
        raise Unsupported(f"arange of {dtype} with shape {list(shape)}")
    n = int(shape[0])
    if n == 0:
        raise Unsupported("empty arange")
    if n > ARANGE_MAX_ELEMENTS:
        raise Unsupported(f"arange of {n} elements (more than {ARANGE_MAX_ELEMENTS} "
                          "are not inlined as a constant)")
    # Real values even while the partitioner runs under a FakeTensorMode.
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        values = torch.arange(start, end, step, dtype=dtype, device="cpu").tolist()
    if len(values) != n:
        raise Unsupported(f"arange({start}, {end}, {step}) has {len(values)} "
                          f"elements, the graph says {n}")
    lit = ", ".join(_literal(v, dtype) for v in values)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, "llm.constant", lambda: f"dense<[{lit}]> : {ty}")


@handles(aten.gelu.default)
def _h_gelu(imp, node):
    args = bind_args(node)
    approx = {"none": "erf", "tanh": "tanh"}.get(args["approximate"])
    if approx is None:
        raise Unsupported(f"gelu approximate={args['approximate']}")
    shape, dtype = imp.out_meta(node)
    x = imp.operand(args["self"], dtype, shape)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, "llm.gelu", lambda: f"{imp.ref(x)} {approx} : {ty}")


_CMP = {aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le",
        aten.gt: "gt", aten.ge: "ge"}


def _cmp_dtype(a, b) -> torch.dtype:
    ma, mb = _meta(a), _meta(b)
    if isinstance(ma, torch.Tensor) and isinstance(mb, torch.Tensor):
        dt = torch.promote_types(ma.dtype, mb.dtype)
    else:
        t = ma if isinstance(ma, torch.Tensor) else mb
        s = b if isinstance(ma, torch.Tensor) else a
        dt = t.dtype
        if isinstance(s, float) and dt not in FLOAT_DTYPES:
            dt = torch.get_default_dtype()
    return torch.int32 if dt == torch.bool else dt


@handles(aten.eq.Tensor, aten.eq.Scalar, aten.ne.Tensor, aten.ne.Scalar,
         aten.lt.Tensor, aten.lt.Scalar, aten.le.Tensor, aten.le.Scalar,
         aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar)
def _h_compare(imp, node):
    pred = _CMP[node.target.overloadpacket]
    shape, _ = imp.out_meta(node)
    a, b = node.args[0], node.args[1]
    dt = _cmp_dtype(a, b)
    va = imp.operand(a, dt, shape)
    vb = imp.operand(b, dt, shape)
    ty = tensor_type(shape, dt)
    return imp.new(shape, torch.bool, "llm.compare",
                   lambda: f"{pred}, {imp.ref(va)}, {imp.ref(vb)} : {ty}")


@handles(aten.logical_not.default, aten.bitwise_not.default)
def _h_logical_not(imp, node):
    shape, dtype = imp.out_meta(node)
    if dtype != torch.bool:
        raise Unsupported("bitwise not on integers")
    x = imp.operand(node.args[0], torch.int32, shape)
    zero = imp.operand(0, torch.int32, shape)
    ty = tensor_type(shape, torch.int32)
    return imp.new(shape, torch.bool, "llm.compare",
                   lambda: f"eq, {imp.ref(x)}, {imp.ref(zero)} : {ty}")


def _select(imp, shape, dtype, c: Val, t: Val, f: Val) -> Val:
    tyc = tensor_type(shape, torch.bool)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, "llm.select",
                   lambda: f"{imp.ref(c)}, {imp.ref(t)}, {imp.ref(f)} : {tyc}, {ty}")


@handles(aten.logical_and.default, aten.logical_or.default,
         aten.bitwise_and.Tensor, aten.bitwise_or.Tensor)
def _h_logical_binary(imp, node):
    shape, dtype = imp.out_meta(node)
    if dtype != torch.bool:
        raise Unsupported("bitwise op on integers")
    a = imp.operand(node.args[0], torch.bool, shape)
    b = imp.operand(node.args[1], torch.bool, shape)
    if node.target in (aten.logical_and.default, aten.bitwise_and.Tensor):
        return _select(imp, shape, torch.bool, a, b, imp.operand(False, torch.bool, shape))
    return _select(imp, shape, torch.bool, a, imp.operand(True, torch.bool, shape), b)


@handles(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _h_where(imp, node):
    shape, dtype = imp.out_meta(node)
    c = imp.operand(node.args[0], torch.bool, shape)
    t = imp.operand(node.args[1], dtype, shape)
    f = imp.operand(node.args[2], dtype, shape)
    return _select(imp, shape, dtype, c, t, f)


# -- types and views ----------------------------------------------------------

@handles(aten._to_copy.default)
def _h_to_copy(imp, node):
    args = bind_args(node)
    src = _meta(node.args[0])
    dst = _meta(node)
    if src is None or dst is None:
        raise Unsupported("no metadata")
    if src.device != dst.device:
        raise Unsupported("device transfer")
    return imp.cast(imp.val(node.args[0]), dst.dtype)


@handles(prims.convert_element_type.default)
def _h_convert(imp, node):
    _, dtype = imp.out_meta(node)
    return imp.cast(imp.val(node.args[0]), dtype)


@handles(aten.clone.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh_copy.default, aten.contiguous.default)
def _h_identity(imp, node):
    imp.out_meta(node)
    return imp.val(node.args[0])


@handles(aten.view.default, aten.reshape.default, aten._unsafe_view.default,
         aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim,
         aten.squeeze.dims, aten.flatten.using_ints, aten.view.dtype)
def _h_reshape(imp, node):
    shape, dtype = imp.out_meta(node)
    x = imp.val(node.args[0])
    if x.dtype != dtype:
        raise Unsupported("view as another dtype")
    return imp.reshape(x, shape)


@handles(aten.permute.default)
def _h_permute(imp, node):
    x = imp.val(node.args[0])
    perm = [_norm_dim(int(d), x.rank) for d in node.args[1]]
    return imp.transpose(x, perm)


@handles(aten.transpose.int)
def _h_transpose(imp, node):
    x = imp.val(node.args[0])
    a, b = _norm_dim(node.args[1], x.rank), _norm_dim(node.args[2], x.rank)
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    return imp.transpose(x, perm)


@handles(aten.t.default)
def _h_t(imp, node):
    x = imp.val(node.args[0])
    return imp.transpose(x, [1, 0]) if x.rank == 2 else x


@handles(aten.expand.default)
def _h_expand(imp, node):
    shape, dtype = imp.out_meta(node)
    return imp.broadcast(imp.val(node.args[0]), shape)


def _static_int(v, what: str, imp: Optional["Importer"] = None) -> Optional[int]:
    """The integer `v` (an int, a SymInt, or an FX node computing a SymInt);
    a symbolic one through `imp`'s bindings (_bound_int)."""
    if v is None:
        return None
    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        if not isinstance(val, (int, torch.SymInt)) or isinstance(val, bool):
            raise Unsupported(f"{what} of kind Node")
        v = val
    if isinstance(v, torch.SymInt):
        expr = v.node.expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        return _bound_int(imp, expr, what)
    if not isinstance(v, int):
        raise Unsupported(f"{what} of kind {type(v).__name__}")
    return v


def bare_symbols(graph: torch.fx.Graph) -> set:
    """Names of the symbols that are whole dimensions of the placeholders
    (or SymInt placeholders): what an import per concrete shape binds.
    Cached on the graph (check_node asks once per node of a symbolic graph)
    while its placeholders and their values are the same objects; the cache
    lives and dies with the graph."""
    placeholders = graph.find_nodes(op="placeholder")
    key = [(n, n.meta.get("val")) for n in placeholders]
    hit = getattr(graph, "_llmc_bare_symbols", None)
    if hit is not None and len(hit[0]) == len(key) and all(
            a is c and b is d for (a, b), (c, d) in zip(hit[0], key)):
        return set(hit[1])
    out = set()
    for n in placeholders:
        m = n.meta.get("val")
        dims = m.shape if isinstance(m, torch.Tensor) else (m,) if isinstance(m, torch.SymInt) else ()
        for d in dims:
            # A whole dimension s, or a*s + b of one (the backend solves it).
            lin = linear_size(d.node.expr) if isinstance(d, torch.SymInt) else None
            if lin is not None:
                out.add(lin[0])
    graph._llmc_bare_symbols = (key, frozenset(out))
    return out


def linear_size(expr) -> Optional[Tuple[str, int, int]]:
    """(s, a, b) when the size expression is a*s + b of one symbol s with
    integers a != 0 and b (a plain symbol is (s, 1, 0)); else None."""
    if len(expr.free_symbols) != 1:
        return None
    (x,) = expr.free_symbols
    if getattr(expr, "is_Symbol", False):
        return str(x), 1, 0
    if not expr.is_polynomial(x):
        return None
    poly = sympy.Poly(expr, x)
    if poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    return (str(x), int(a), int(b)) if a.is_Integer and b.is_Integer else None


def _backed(imp, expr) -> bool:
    """Whether a size expression depends only on sizes that an import per
    concrete shape binds (Dynamo's backed symbols s0, s1, ... that are whole
    input dimensions; unbacked ones, u0, come from data)."""
    names = [str(x) for x in expr.free_symbols]
    if not names or not all(x.startswith("s") for x in names):
        return False
    known = imp.bare_symbols() if isinstance(imp, Importer) else None
    return known is None or all(x in known for x in names)


def _bound_int(imp: Optional["Importer"], expr, what: str) -> int:
    """A symbolic integer of the graph: its value under an import per
    concrete shape (`imp.bindings`); NeedsStatic in a dynamic import when it
    depends only on input sizes (the backend then imports per shape);
    Unsupported otherwise."""
    if imp is not None and imp.bindings is not None:
        if all(str(x) in imp.bindings for x in expr.free_symbols):
            val = sympy.sympify(expr).xreplace(
                {x: sympy.Integer(imp.bindings[str(x)]) for x in expr.free_symbols})
            if getattr(val, "is_Integer", False):
                return int(val)
    elif imp is not None and _backed(imp, expr):
        raise NeedsStatic(f"symbolic {what} ({expr})")
    raise Unsupported(f"symbolic {what}")


def _needs_static(imp: "Importer", why: str):
    """Raises NeedsStatic for a dynamic import (the backend imports the graph
    per concrete shape, where `why` no longer holds), Unsupported for an
    import per shape."""
    if imp.bindings is None:
        raise NeedsStatic(why)
    raise Unsupported(why)


def _slice(imp, x: Val, dim: int, start, end, step) -> Val:
    size = x.shape[dim]
    if not _is_static(size):
        whole_end = end is None or (isinstance(end, int) and end >= 2**62) or (
            isinstance(end, torch.SymInt) and _same_dim(end.node.expr, size))
        if (start in (None, 0)) and whole_end and step == 1:
            return x
        _needs_static(imp, "slice of a dynamic dimension other than the whole")
    start = _static_int(start, "slice start", imp) or 0
    end = _static_int(end, "slice end", imp)
    step = _static_int(step, "slice step", imp) or 1
    if step <= 0:
        raise Unsupported("non-positive slice step")
    if end is None or end > size:
        end = size
    if start < 0:
        start = max(start + size, 0)
    if end < 0:
        end = max(end + size, 0)
    start = min(start, size)
    end = max(min(end, size), start)
    if start == 0 and end == size and step == 1:
        return x
    if end == start:
        raise Unsupported("empty slice")
    n = (end - start + step - 1) // step
    starts = [0] * x.rank
    limits = [-1] * x.rank
    steps = [1] * x.rank
    starts[dim], limits[dim], steps[dim] = start, end, step
    shape = list(x.shape)
    shape[dim] = n
    fmt = lambda l: "[" + ", ".join(str(i) for i in l) + "]"
    return imp.new(shape, x.dtype, "llm.slice",
                   lambda: f"{imp.ref(x)} {fmt(starts)} to {fmt(limits)} step {fmt(steps)} : {x.type}")


@handles(aten.slice.Tensor)
def _h_slice(imp, node):
    args = bind_args(node)
    x = imp.val(args["self"])
    dim = _norm_dim(args["dim"], x.rank)
    return _slice(imp, x, dim, args["start"], args["end"], args["step"])


@handles(aten.select.int)
def _h_select_int(imp, node):
    x = imp.val(node.args[0])
    dim = _norm_dim(node.args[1], x.rank)
    idx = _static_int(node.args[2], "select index")
    size = x.shape[dim]
    if not _is_static(size):
        raise Unsupported("select on a dynamic dimension")
    if idx < 0:
        idx += size
    s = _slice(imp, x, dim, idx, idx + 1, 1)
    shape, _ = imp.out_meta(node)
    return imp.reshape(s, shape)


@handles(aten.split_with_sizes.default, aten.split.Tensor)
def _h_split(imp, node):
    x = imp.val(node.args[0])
    dim = _norm_dim(node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0), x.rank)
    size = x.shape[dim]
    if not _is_static(size):
        raise Unsupported("split of a dynamic dimension")
    if node.target is aten.split.Tensor:
        step = _static_int(node.args[1], "split size")
        sizes = [min(step, size - i) for i in range(0, size, step)]
    else:
        sizes = [_static_int(s, "split size") for s in node.args[1]]
    outs, start = [], 0
    for n in sizes:
        outs.append(_slice(imp, x, dim, start, start + n, 1))
        start += n
    return outs


SPLIT_OPS = {aten.split_with_sizes.default, aten.split.Tensor}


@handles(aten.cat.default)
def _h_cat(imp, node):
    shape, dtype = imp.out_meta(node)
    tensors = [t for t in node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    dim = _norm_dim(dim, len(shape))
    vals = []
    for t in tensors:
        m = _meta(t)
        if m is not None and m.dim() == 1 and m.shape[0] == 0 and len(shape) != 1:
            continue  # legacy empty tensor
        v = imp.cast(imp.val(t), dtype)
        if v.shape[dim] == 0:
            continue
        vals.append(v)
    if not vals:
        raise Unsupported("concat of empty tensors")
    return _concat(imp, vals, dim, shape, dtype)


def _concat(imp, vals: List[Val], dim: int, shape, dtype) -> Val:
    """`vals` (nonempty along `dim`) concatenated along `dim` into `shape`."""
    if len(vals) == 1:
        return vals[0]
    if any(not (_is_static(d) and d == 1) for d in shape[:dim]):
        # The CUDA codegen concatenates only where every outer dimension is 1
        # (block copies): move `dim` to the front, concatenate there, move it
        # back (RoPE's rotate_half = cat(-x2, x1, -1) stays in the graph).
        perm = [dim] + [i for i in range(len(shape)) if i != dim]
        inv = [perm.index(i) for i in range(len(shape))]
        moved = [imp.transpose(v, perm) for v in vals]
        mshape = tuple(shape[i] for i in perm)
        types = ", ".join(v.type for v in moved)
        cat = imp.new(mshape, dtype, "llm.concat",
                      lambda: f"{', '.join(imp.ref(v) for v in moved)} dim = 0 : {types}")
        return imp.transpose(cat, inv)
    types = ", ".join(v.type for v in vals)
    return imp.new(shape, dtype, "llm.concat",
                   lambda: f"{', '.join(imp.ref(v) for v in vals)} dim = {dim} : {types}")


@handles(aten.constant_pad_nd.default)
def _h_constant_pad_nd(imp, node):
    """F.pad(x, pad, value) (pad: (low, high) pairs from the last dimension
    back): blocks of `value` concatenated before and after along each padded
    dimension, negative pads as slices. Hugging Face's causal-LM loss shifts
    the labels with pad(labels, (0, 1), value=-100)."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.cast(imp.val(args["self"]), dtype)
    pad = [_static_int(p, "pad amount", imp) for p in args["pad"]]
    value = args.get("value", 0)
    if not isinstance(value, (bool, int, float)):
        raise Unsupported("symbolic pad value")
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise Unsupported(f"pad of {len(pad)} amounts for rank {x.rank}")
    for i in range(len(pad) // 2):
        dim = x.rank - 1 - i
        low, high = pad[2 * i], pad[2 * i + 1]
        if low < 0:
            x = _slice(imp, x, dim, -low, None, 1)
        if high < 0:
            x = _slice(imp, x, dim, 0, x.shape[dim] + high, 1)
        parts = []
        for n in (max(low, 0), None, max(high, 0)):
            if n is None:
                parts.append(x)
            elif n:
                bshape = tuple(x.shape[:dim]) + (n,) + tuple(x.shape[dim + 1:])
                parts.append(imp.constant(value, dtype, bshape))
        if len(parts) > 1:
            out = tuple(x.shape[:dim]) + (sum(p.shape[dim] for p in parts),) + tuple(x.shape[dim + 1:])
            x = _concat(imp, parts, dim, out, dtype)
    return x


@handles(aten.any.dim, aten.any.dims, aten.any.default)
def _h_any(imp, node):
    """torch.any over dimensions: max over {0, 1} in f32, then > 0 (any
    integer or float input counts its nonzero elements; NaN is nonzero)."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.val(args["self"])
    dims = args.get("dim")
    if dims is None:
        dims = list(range(x.rank))
    elif isinstance(dims, int):
        dims = [dims]
    dims = sorted({_norm_dim(d, x.rank) for d in dims})
    keep = bool(args.get("keepdim", False))
    if any(not _is_static(x.shape[d]) or int(x.shape[d]) == 0 for d in dims):
        raise Unsupported("any over an empty or dynamic dimension")
    f32 = torch.float32
    if x.dtype == torch.bool:
        nz = x
    else:
        zero = imp.operand(0, x.dtype, x.shape)
        nz = imp.new(x.shape, torch.bool, "llm.compare",
                     lambda: f"ne, {imp.ref(x)}, {imp.ref(zero)} : {x.type}")
    one = imp.operand(1.0, f32, x.shape)
    zero_f = imp.operand(0.0, f32, x.shape)
    if x.rank == 0 or not dims:  # nothing reduced: the elementwise test
        return imp.reshape(imp.cast(nz, dtype), shape)
    flags = _select(imp, x.shape, f32, nz, one, zero_f)
    rshape = tuple(d for i, d in enumerate(x.shape) if i not in dims or keep) if not keep else \
        tuple(1 if i in dims else d for i, d in enumerate(x.shape))
    dl = ", ".join(str(d) for d in dims)
    kd = " keepdim" if keep else ""
    m = imp.new(rshape, f32, "llm.reduce_max", lambda: f"{imp.ref(flags)} [{dl}]{kd} : {flags.type}")
    half = imp.operand(0.5, f32, rshape)
    rty = tensor_type(rshape, f32)
    res = imp.new(rshape, torch.bool, "llm.compare",
                  lambda: f"gt, {imp.ref(m)}, {imp.ref(half)} : {rty}")
    return imp.reshape(imp.cast(res, dtype), shape)


@handles(aten.slice_scatter.default)
def _h_slice_scatter(imp, node):
    """slice_scatter(base, src, dim, start, end, 1): base with base[start:end]
    along `dim` replaced by src, as concat(base[:start], src, base[end:])
    (the backward of slicing and of split: q/k/v and the RoPE halves)."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    base, src = imp.val(args["self"]), imp.val(args["src"])
    dim = _norm_dim(args.get("dim", 0), base.rank)
    size = base.shape[dim]
    if not _is_static(size):
        raise Unsupported("slice_scatter along a dynamic dimension")
    if (_static_int(args.get("step", 1), "slice_scatter step") or 1) != 1:
        raise Unsupported("slice_scatter with a step other than 1")
    start = _static_int(args.get("start"), "slice_scatter start") or 0
    end = _static_int(args.get("end"), "slice_scatter end")
    end = size if end is None or end > size else end
    start = max(start + size, 0) if start < 0 else min(start, size)
    end = max(end + size, 0) if end < 0 else end
    if src.shape[dim] != max(end - start, 0):
        raise Unsupported("slice_scatter whose source does not fill the slice")
    base, src = imp.cast(base, dtype), imp.cast(src, dtype)
    pieces = []
    if start > 0:
        pieces.append(_slice(imp, base, dim, 0, start, 1))
    if end > start:
        pieces.append(src)
    if end < size:
        pieces.append(_slice(imp, base, dim, end, size, 1))
    return _concat(imp, pieces, dim, shape, dtype)


# A one-hot comparison along a dimension compares with [0, n) as a dense
# constant of this many elements at most (vocabularies up to 256K).
IOTA_MAX_ELEMENTS = 1 << 18


def _one_hot_along(imp, idx: Val, dim: int, shape) -> Val:
    """bool `shape`: position j along `dim` equals idx (size 1 along `dim`,
    broadcast over it): the one-hot of a torch.gather/scatter index."""
    n = shape[dim]
    if not _is_static(n):
        raise Unsupported("gather/scatter along a dynamic dimension")
    n = int(n)
    if n > IOTA_MAX_ELEMENTS:
        raise Unsupported(f"gather/scatter along a dimension of {n} elements "
                          f"(at most {IOTA_MAX_ELEMENTS})")
    lit = ", ".join(str(i) for i in range(n))
    ity = tensor_type((n,), idx.dtype)
    iota = imp.new((n,), idx.dtype, "llm.constant", lambda: f"dense<[{lit}]> : {ity}")
    iota = imp.reshape(iota, tuple(n if i == dim else 1 for i in range(len(shape))))
    a, b = imp.broadcast(iota, shape), imp.broadcast(idx, shape)
    ty = tensor_type(shape, idx.dtype)
    return imp.new(shape, torch.bool, "llm.compare",
                   lambda: f"eq, {imp.ref(a)}, {imp.ref(b)} : {ty}")


def _index_along(imp, x: Val, idx: Val, dim: int, what: str):
    """Checks a torch.gather/scatter index: integer, x's rank, one element
    along `dim` (one per row, as cross-entropy's), x's sizes elsewhere."""
    if idx.dtype not in (torch.int32, torch.int64):
        raise Unsupported(f"{what} indices of type {idx.dtype}")
    if idx.rank != x.rank:
        raise Unsupported(f"{what} indices of another rank")
    if not (_is_static(idx.shape[dim]) and idx.shape[dim] == 1):
        raise Unsupported(f"{what} of more than one element per row")
    for i in range(x.rank):
        if i != dim and not _same_dim(idx.shape[i], x.shape[i]):
            raise Unsupported(f"{what} indices smaller than the tensor")


@handles(aten.gather.default)
def _h_gather_along(imp, node):
    """torch.gather(x, dim, index) with one index per row (the negative
    log-likelihood of cross-entropy): out = sum over `dim` of
    select(one_hot(index), x, 0), exact in floating point (one nonzero
    term). An index out of range gives 0 where PyTorch raises."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x, idx = imp.val(args["self"]), imp.val(args["index"])
    dim = _norm_dim(args["dim"], x.rank)
    if dtype not in FLOAT_DTYPES:
        raise Unsupported(f"gather of {dtype} (the sum accumulates in fp32)")
    _index_along(imp, x, idx, dim, "gather")
    hot = _one_hot_along(imp, idx, dim, x.shape)
    sel = _select(imp, x.shape, dtype, hot, x, imp.operand(0, dtype, x.shape))
    return imp.new(shape, dtype, "llm.reduce_sum",
                   lambda: f"{imp.ref(sel)} [{dim}] keepdim : {sel.type}")


@handles(aten.scatter.value, aten.scatter.src)
def _h_scatter_along(imp, node):
    """torch.scatter(base, dim, index, value or src) with one index per row
    (cross-entropy's backward): select(one_hot(index), value, base)."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    base, idx = imp.val(args["self"]), imp.val(args["index"])
    dim = _norm_dim(args["dim"], base.rank)
    _index_along(imp, base, idx, dim, "scatter")
    if node.target is aten.scatter.src:
        src = imp.val(args["src"])
        if not _same_shape(src.shape, idx.shape):
            raise Unsupported("scatter source of another shape than the index")
        update = imp.operand(src, dtype, shape)
    else:
        update = imp.operand(args["value"], dtype, shape)
    hot = _one_hot_along(imp, idx, dim, shape)
    return _select(imp, shape, dtype, hot, update, imp.operand(base, dtype, shape))


@handles(aten.embedding.default)
def _h_embedding(imp, node):
    shape, dtype = imp.out_meta(node)
    w, idx = imp.val(node.args[0]), imp.val(node.args[1])
    if idx.dtype not in (torch.int32, torch.int64):
        raise Unsupported(f"indices of type {idx.dtype}")
    return imp.new(shape, dtype, "llm.gather",
                   lambda: f"{imp.ref(w)}, {imp.ref(idx)} axis = 0 : {w.type}, {idx.type}")


@handles(aten.index_select.default)
def _h_index_select(imp, node):
    shape, dtype = imp.out_meta(node)
    x, idx = imp.val(node.args[0]), imp.val(node.args[2])
    dim = _norm_dim(node.args[1], x.rank)
    if idx.dtype not in (torch.int32, torch.int64):
        raise Unsupported(f"indices of type {idx.dtype}")
    return imp.new(shape, dtype, "llm.gather",
                   lambda: f"{imp.ref(x)}, {imp.ref(idx)} axis = {dim} : {x.type}, {idx.type}")


def _index_put(imp, node, base: Val, dim: int, idx: Val, values, accumulate: bool) -> Val:
    """`base` with the slices of `values` (broadcast to the indexed shape
    base[:dim] + idx.shape + base[dim+1:]) written (or added) at `idx` along
    `dim`: one llm.index_put over the flattened indices."""
    shape, dtype = imp.out_meta(node)
    if idx.dtype not in (torch.int32, torch.int64):
        raise Unsupported(f"index_put with indices of type {idx.dtype} (integer "
                          "indices are supported; boolean masks are not)")
    if dtype not in MLIR_DTYPES or dtype == torch.bool:
        raise Unsupported(f"index_put into {dtype}")
    if accumulate and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"index_put accumulate into {dtype} (f32, bf16, f16 are supported)")
    base = imp.cast(base, dtype)
    lead, tail = tuple(base.shape[:dim]), tuple(base.shape[dim + 1:])
    n = _prod(idx.shape) if idx.rank else 1
    flat = imp.reshape(idx, (n,))
    src = imp.operand(values, dtype, lead + tuple(idx.shape) + tail)
    src = imp.reshape(src, lead + (n,) + tail)
    flag = " {accumulate}" if accumulate else ""
    return imp.new(shape, dtype, "llm.index_put",
                   lambda: f"{imp.ref(base)}[{imp.ref(flat)}], {imp.ref(src)} dim = {dim}{flag} : "
                           f"{base.type}, {flat.type}, {src.type}")


def _single_index(imp, indices, what: str) -> Tuple[int, Val]:
    """(axis, index tensor) of an ATen index list with one tensor, the
    others None (`x[:, :, pos]`); Unsupported otherwise."""
    where = [i for i, t in enumerate(indices) if t is not None]
    if len(where) != 1:
        raise Unsupported(f"{what} with {len(where)} index tensors (one is supported)")
    return where[0], imp.val(indices[where[0]])


@handles(aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default)
def _h_index_put(imp, node):
    """index_put(base, indices, values, accumulate) with one index tensor
    (the others None): the KV-cache write `cache[:, :, pos] = k` (also what
    index_copy decomposes to), the embedding backward `index_put(zeros,
    [tokens], grad, True)` and index_add."""
    args = bind_args(node)
    axis, idx = _single_index(imp, args["indices"], "index_put")
    return _index_put(imp, node, imp.val(args["self"]), axis, idx,
                      args["values"], bool(args.get("accumulate", False)))


def _wrapped_index(imp, raw: Val, rows) -> Val:
    """raw + rows where raw < 0 (PyTorch's wrap; llm.gather takes [0, rows))."""
    if raw.dtype not in (torch.int32, torch.int64):
        raise Unsupported(f"indexing with indices of type {raw.dtype} (integer indices "
                          "are supported; boolean masks are not)")
    if not _is_static(rows):
        raise Unsupported("indexing along a dynamic dimension")
    zero = imp.operand(0, raw.dtype, raw.shape)
    n = imp.operand(int(rows), raw.dtype, raw.shape)
    neg = imp.new(raw.shape, torch.bool, "llm.compare",
                  lambda: f"lt, {imp.ref(raw)}, {imp.ref(zero)} : {raw.type}")
    wrapped = imp.new(raw.shape, raw.dtype, "llm.add",
                      lambda: f"{imp.ref(raw)}, {imp.ref(n)} : {raw.type}")
    return _select(imp, raw.shape, raw.dtype, neg, wrapped, raw)


def _broadcast_shapes(shapes):
    """NumPy broadcast of static shapes; Unsupported when they do not."""
    rank = max(len(sh) for sh in shapes)
    out = []
    for i in range(rank):
        sizes = {int(sh[i - rank + len(sh)]) for sh in shapes if i - rank + len(sh) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise Unsupported(f"index tensors of shapes {[list(sh) for sh in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


@handles(aten.index.Tensor)
def _h_index_tensor(imp, node):
    """x[..., i0, i1, ..., ...] with integer index tensors for adjacent
    dimensions (the others None): the RoPE table or causal-mask rows at the
    decode positions (`cos[input_pos]`, `mask[None, None, input_pos]`), or
    Hugging Face's mask lookups `packed[batch_idx, q_idx]`, as one llm.gather
    along the first indexed axis of x with those dimensions flattened, at the
    linear index sum_d i_d * stride_d (result x.shape[:a] + broadcast(index
    shapes) + x.shape[a+k:], PyTorch's rule for adjacent indices). Negative
    indices count from the end, as in PyTorch."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.val(args["self"])
    indices = list(args["indices"])
    where = [i for i, t in enumerate(indices) if t is not None]
    if not where:
        raise Unsupported("indexing without index tensors")
    axis, k = where[0], len(where)
    if where != list(range(axis, axis + k)):
        raise Unsupported("indexing with index tensors of non-adjacent dimensions")
    raws = [imp.val(indices[i]) for i in where]
    if k == 1:
        idx = _wrapped_index(imp, raws[0], x.shape[axis])
    else:
        sizes = x.shape[axis:axis + k]
        if not all(_is_static(d) for d in sizes) or not all(
                _is_static(d) for r in raws for d in r.shape):
            _needs_static(imp, "indexing with several index tensors of dynamic shape")
        bshape = _broadcast_shapes([r.shape for r in raws])
        i64 = torch.int64
        ty = tensor_type(bshape, i64)
        idx, valid = None, None
        for d, raw in enumerate(raws):
            # In [-size, size) (PyTorch raises otherwise): else the linear
            # index would alias another row; an invalid one is sent out of
            # range below so the gather refuses it.
            r64 = imp.operand(imp.cast(raw, i64), i64, bshape)
            lo = imp.operand(-int(sizes[d]), i64, bshape)
            hi = imp.operand(int(sizes[d]), i64, bshape)
            ge = imp.new(bshape, torch.bool, "llm.compare",
                         lambda r=r64, lo=lo: f"ge, {imp.ref(r)}, {imp.ref(lo)} : {ty}")
            lt = imp.new(bshape, torch.bool, "llm.compare",
                         lambda r=r64, hi=hi: f"lt, {imp.ref(r)}, {imp.ref(hi)} : {ty}")
            for c in (ge, lt):
                valid = c if valid is None else _select(
                    imp, bshape, torch.bool, valid, c, imp.operand(False, torch.bool, bshape))
            term = imp.operand(imp.cast(_wrapped_index(imp, raw, sizes[d]), i64), i64, bshape)
            stride = _prod(sizes[d + 1:])
            if stride != 1:
                c = imp.operand(int(stride), i64, bshape)
                term = imp.new(bshape, i64, "llm.mul",
                               lambda t=term, c=c: f"{imp.ref(t)}, {imp.ref(c)} : {ty}")
            idx = term if idx is None else imp.new(
                bshape, i64, "llm.add", lambda a=idx, t=term: f"{imp.ref(a)}, {imp.ref(t)} : {ty}")
        idx = _select(imp, bshape, i64, valid, idx, imp.operand(int(_prod(sizes)), i64, bshape))
        x = imp.reshape(x, tuple(x.shape[:axis]) + (_prod(sizes),) + tuple(x.shape[axis + k:]))
    if axis + 1 == x.rank:
        # Single elements: gathered as rows of one (what codegen lowers).
        x = imp.reshape(x, tuple(x.shape) + (1,))
        rows = tuple(x.shape[:axis]) + tuple(idx.shape) + (1,)
        g = imp.new(rows, dtype, "llm.gather",
                    lambda: f"{imp.ref(x)}, {imp.ref(idx)} axis = {axis} : {x.type}, {idx.type}")
        return imp.reshape(g, shape)
    return imp.new(shape, dtype, "llm.gather",
                   lambda: f"{imp.ref(x)}, {imp.ref(idx)} axis = {axis} : {x.type}, {idx.type}")


@handles(aten.cumsum.default)
def _h_cumsum(imp, node):
    """torch.cumsum(x, dim, dtype=None) -> llm.cumsum (bool and integer
    inputs count in int64, as PyTorch's result type says)."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.val(args["self"])
    if x.rank == 0:
        return imp.cast(x, dtype)
    dim = _norm_dim(args["dim"], x.rank)
    if dtype in FLOAT_DTYPES:
        x = imp.cast(x, dtype)  # a float result sums the input in that type
    elif dtype not in (torch.int64, torch.int32):
        raise Unsupported(f"cumsum into {dtype}")
    elif x.dtype in FLOAT_DTYPES:
        raise Unsupported("cumsum of floats into integers")
    rty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, "llm.cumsum",
                   lambda: f"{imp.ref(x)} dim = {dim} : {x.type} -> {rty}")


@handles(aten.native_dropout.default)
def _h_native_dropout(imp, node):
    """native_dropout(x, p, train) -> (x * keep * 1/(1 - p), keep): keep from
    llm.dropout_mask on the function's `%rng_seed` (one stream per site), so
    a training step's masks change per call and follow torch.manual_seed,
    though they are not PyTorch's (another generator). Without training or
    with p = 0 every element is kept, as PyTorch does."""
    args = bind_args(node)
    x = imp.val(args["input"])
    p, train = args["p"], args["train"]
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise Unsupported("dropout with a symbolic probability")
    p = float(p)
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"dropout of {x.dtype}")
    if not all(_is_static(d) for d in x.shape):
        raise Unsupported("dropout of a dynamic shape")
    if not 0.0 <= p <= 1.0 - 2.0 ** -24:
        # Beyond 1 - 2^-24 the 24-bit keep threshold drops everything while
        # the scale 1/(1 - p) stays finite: refused.
        raise Unsupported(f"dropout with p = {p} (0 <= p <= 1 - 2^-24 is supported)")
    bty = tensor_type(x.shape, torch.bool)
    if train is False or p == 0.0:
        return [x, imp.constant(True, torch.bool, x.shape)]
    seed = imp.rng_seed()
    stream = imp.rng_streams
    imp.rng_streams += 1
    keep = imp.new(x.shape, torch.bool, "llm.dropout_mask",
                   lambda: f"{imp.ref(seed)} {{p = {f64_literal(p)} : f64, stream = {stream} : i64}}"
                           f" : tensor<i64> -> {bty}")
    # In float32 with a float32 scale, rounded once, as PyTorch's CUDA
    # dropout kernel (a bf16 scale, 1.109375 for p = 0.1, would bias the
    # expectation by 0.15%; an f16 one overflows for p near 1).
    f32 = torch.float32
    xf = imp.cast(x, f32)
    keepf = imp.cast(keep, f32)
    fty = tensor_type(x.shape, f32)
    kept = imp.new(x.shape, f32, "llm.mul", lambda: f"{imp.ref(xf)}, {imp.ref(keepf)} : {fty}")
    scale = imp.operand(1.0 / (1.0 - p), f32, x.shape)
    out = imp.new(x.shape, f32, "llm.mul", lambda: f"{imp.ref(kept)}, {imp.ref(scale)} : {fty}")
    return [imp.cast(out, x.dtype), keep]


@handles(aten.argmax.default)
def _h_argmax(imp, node):
    """torch.argmax(x, dim=None, keepdim=False): llm.argmax (first maximum,
    NaN largest); without dim over the flattened tensor. The greedy next
    token of a decode step."""
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.val(args["self"])
    if x.rank == 0:
        raise Unsupported("argmax of a scalar")
    if args.get("dim") is None:  # over all elements; keepdim: all sizes 1
        x = imp.reshape(x, (_prod(x.shape),))
        dim = 0
    else:
        dim = _norm_dim(args["dim"], x.rank)
    rshape = tuple(d for i, d in enumerate(x.shape) if i != dim)
    out = imp.new(rshape, torch.int64, "llm.argmax",
                  lambda: f"{imp.ref(x)} dim = {dim} : {x.type}")
    return imp.cast(imp.reshape(out, shape), dtype)


# -- constants ------------------------------------------------------------------

@handles(aten.full.default, aten.scalar_tensor.default, aten.full_like.default,
         aten.zeros.default, aten.ones.default)
def _h_full(imp, node):
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    if node.target is aten.scalar_tensor.default:
        value = args["s"]
    elif node.target is aten.zeros.default:
        value = 0
    elif node.target is aten.ones.default:
        value = 1
    else:
        value = args["fill_value"]
    if not isinstance(value, (bool, int, float)):
        raise Unsupported("symbolic fill value")
    return imp.constant(value, dtype, shape)


# -- reductions -------------------------------------------------------------------

_REDUCE = {aten.sum: "llm.reduce_sum", aten.mean: "llm.reduce_mean",
           aten.amax: "llm.reduce_max", aten.amin: "llm.reduce_min"}


@handles(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
         aten.amax.default, aten.amin.default)
def _h_reduce(imp, node):
    op = _REDUCE[node.target.overloadpacket]
    shape, dtype = imp.out_meta(node)
    args = bind_args(node)
    x = imp.val(args["self"])
    dims = args.get("dim")
    if not dims:
        dims = list(range(x.rank))
    dims = sorted({_norm_dim(d, x.rank) for d in dims})
    keep = bool(args.get("keepdim", False))
    if dtype == torch.bool:
        raise Unsupported(f"{op} of booleans")
    if op == "llm.reduce_mean" and dtype not in FLOAT_DTYPES:
        raise Unsupported("integer mean")
    if x.rank == 0:
        return imp.cast(x, dtype)
    x = imp.cast(x, dtype)
    dl = ", ".join(str(d) for d in dims)
    kd = " keepdim" if keep else ""
    return imp.new(shape, dtype, op, lambda: f"{imp.ref(x)} [{dl}]{kd} : {x.type}")


@handles(aten._softmax.default)
def _h_softmax(imp, node):
    shape, dtype = imp.out_meta(node)
    x = imp.val(node.args[0])
    if _norm_dim(node.args[1], x.rank) != x.rank - 1:
        raise Unsupported("softmax over a dimension other than the last")
    x = imp.cast(x, dtype)
    return imp.new(shape, dtype, "llm.softmax", lambda: f"{imp.ref(x)} : {x.type}")


@handles(aten._log_softmax.default)
def _h_log_softmax(imp, node):
    # log_softmax(x) = (x - max) - log(sum(exp(x - max)))
    shape, dtype = imp.out_meta(node)
    x = imp.val(node.args[0])
    last = x.rank - 1
    if _norm_dim(node.args[1], x.rank) != last or dtype not in FLOAT_DTYPES:
        raise Unsupported("log_softmax over a dimension other than the last")
    x = imp.cast(x, dtype)
    ty = x.type
    kshape = shape[:-1] + (1,)
    m = imp.new(kshape, dtype, "llm.reduce_max", lambda: f"{imp.ref(x)} [{last}] keepdim : {ty}")
    mb = imp.broadcast(m, shape)
    z = imp.new(shape, dtype, "llm.sub", lambda: f"{imp.ref(x)}, {imp.ref(mb)} : {ty}")
    e = imp.new(shape, dtype, "llm.exp", lambda: f"{imp.ref(z)} : {ty}")
    s = imp.new(kshape, dtype, "llm.reduce_sum", lambda: f"{imp.ref(e)} [{last}] keepdim : {ty}")
    kty = tensor_type(kshape, dtype)
    ls = imp.new(kshape, dtype, "llm.log", lambda: f"{imp.ref(s)} : {kty}")
    lb = imp.broadcast(ls, shape)
    return imp.new(shape, dtype, "llm.sub", lambda: f"{imp.ref(z)}, {imp.ref(lb)} : {ty}")


@handles(aten.native_layer_norm.default)
def _h_layer_norm(imp, node):
    args = bind_args(node)
    x = imp.val(args["input"])
    if len(args["normalized_shape"]) != 1:
        raise Unsupported("layer norm over more than the last dimension")
    if x.dtype not in FLOAT_DTYPES:
        raise Unsupported("layer norm of integers")
    h = x.shape[-1]
    w = imp.val(args["weight"]) if args["weight"] is not None else imp.constant(1.0, x.dtype, (h,))
    b = imp.val(args["bias"]) if args["bias"] is not None else None
    eps = float(args["eps"])
    wt = w.type
    bt = f", {b.type}" if b is not None else ""
    out = imp.new(x.shape, x.dtype, "llm.layer_norm",
                  lambda: f"{imp.ref(x)}, {imp.ref(w)}"
                          + (f", {imp.ref(b)}" if b is not None else "")
                          + f" {{eps = {f64_literal(eps)} : f64}} : {x.type}, {wt}{bt}")
    return [out] + _layer_norm_statistics(imp, node, x, eps)


def _layer_norm_statistics(imp, node, x: Val, eps: float):
    """native_layer_norm's outputs 1 and 2, saved for its backward in
    training: the mean and 1/sqrt(var + eps) (biased variance) of each row
    over the last dimension, shaped [..., 1], computed in float32 and given
    the type PyTorch gives them. [None, None] when their meta says otherwise."""
    metas = _meta(node)
    if not isinstance(metas, (tuple, list)) or len(metas) != 3:
        return [None, None]
    kshape = tuple(x.shape[:-1]) + (1,)
    for m in metas[1:]:
        if (not isinstance(m, torch.Tensor) or m.dtype not in FLOAT_DTYPES
                or not all(_same_dim(a, b) for a, b in zip(imp.dims(m), kshape))
                or len(m.shape) != len(kshape)):
            return [None, None]
    f32 = torch.float32
    last = x.rank - 1
    xf = imp.cast(x, f32)
    ty, kty = xf.type, tensor_type(kshape, f32)
    mean = imp.new(kshape, f32, "llm.reduce_mean",
                   lambda: f"{imp.ref(xf)} [{last}] keepdim : {ty}")
    mb = imp.broadcast(mean, x.shape)
    d = imp.new(x.shape, f32, "llm.sub", lambda: f"{imp.ref(xf)}, {imp.ref(mb)} : {ty}")
    sq = imp.new(x.shape, f32, "llm.mul", lambda: f"{imp.ref(d)}, {imp.ref(d)} : {ty}")
    var = imp.new(kshape, f32, "llm.reduce_mean",
                  lambda: f"{imp.ref(sq)} [{last}] keepdim : {ty}")
    e = imp.operand(eps, f32, kshape)
    ve = imp.new(kshape, f32, "llm.add", lambda: f"{imp.ref(var)}, {imp.ref(e)} : {kty}")
    rstd = imp.new(kshape, f32, "llm.rsqrt", lambda: f"{imp.ref(ve)} : {kty}")
    return [imp.cast(mean, metas[1].dtype), imp.cast(rstd, metas[2].dtype)]


# -- matmul and attention ----------------------------------------------------------------

def _matmul(imp, a: Val, b: Val, out_shape, out_dtype, bias: Optional[Val] = None) -> Val:
    if a.dtype not in FLOAT_DTYPES or b.dtype not in FLOAT_DTYPES:
        raise Unsupported("integer matmul")
    if a.dtype != b.dtype:
        raise Unsupported("matmul operands of different types")
    attrs = []
    # mm(x, transpose(w)) => matmul(x, w) {transpose_rhs}
    if b.transpose_of is not None:
        src, perm = b.transpose_of
        r = len(perm)
        if r >= 2 and perm == tuple(range(r - 2)) + (r - 1, r - 2):
            b = src
            attrs.append("transpose_rhs")
    if a.transpose_of is not None:
        src, perm = a.transpose_of
        r = len(perm)
        if r >= 2 and perm == tuple(range(r - 2)) + (r - 1, r - 2):
            a = src
            attrs.append("transpose_lhs")
    result_shape = tuple(out_shape)
    reshape_back = False
    # mm(reshape(x:[..., K] -> [M, K]), w) => reshape(matmul(x, w))
    if (a.rank == 2 and b.rank == 2 and "transpose_lhs" not in attrs
            and a.reshape_base is not None and a.reshape_base.rank > 2):
        base = a.reshape_base
        if (_same_dim(base.shape[-1], a.shape[-1])
                and _same_dim(_prod(base.shape[:-1]), a.shape[0])):
            a = base
            result_shape = tuple(base.shape[:-1]) + (out_shape[-1],)
            reshape_back = True
    attr = (" {" + ", ".join(attrs) + "}") if attrs else ""
    bias_s = lambda: f" bias {imp.ref(bias)}" if bias is not None else ""
    bias_t = f", {bias.type}" if bias is not None else ""
    rty = tensor_type(result_shape, out_dtype)
    res = imp.new(result_shape, out_dtype, "llm.matmul",
                  lambda: f"{imp.ref(a)}, {imp.ref(b)}{bias_s()}{attr} : {a.type}, {b.type}{bias_t} -> {rty}")
    if reshape_back:
        return imp.reshape(res, out_shape)
    return res


@handles(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _h_mm(imp, node):
    shape, dtype = imp.out_meta(node)
    a, b = imp.val(node.args[0]), imp.val(node.args[1])
    if a.rank < 2 or b.rank < 2:
        raise Unsupported("matmul of a vector")
    return _matmul(imp, a, b, shape, dtype)


@handles(aten.addmm.default)
def _h_addmm(imp, node):
    args = bind_args(node)
    if args.get("beta", 1) != 1 or args.get("alpha", 1) != 1:
        raise Unsupported("addmm with alpha or beta")
    shape, dtype = imp.out_meta(node)
    a, b = imp.val(args["mat1"]), imp.val(args["mat2"])
    bias = imp.val(args["self"])
    if bias.rank == 1 and _same_dim(bias.shape[0], shape[-1]) and bias.dtype == a.dtype:
        return _matmul(imp, a, b, shape, dtype, bias=bias)
    mm = _matmul(imp, a, b, shape, dtype)
    bb = imp.broadcast(imp.cast(bias, dtype), shape)
    ty = tensor_type(shape, dtype)
    return imp.new(shape, dtype, "llm.add", lambda: f"{imp.ref(mm)}, {imp.ref(bb)} : {ty}")


# PyTorch's cuDNN SDPA path spells a boolean mask as where(mask, 0, -65504)
# (cuDNN takes no -inf; -65504 is float16's lowest value, -65536 in bf16).
_CUDNN_MASKED = -65504.0


def _scalar_constant(n):
    """The value of a Python number or an aten.scalar_tensor/full of one, else None."""
    if isinstance(n, (int, float)) and not isinstance(n, bool):
        return float(n)
    if isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in (
            aten.scalar_tensor.default, aten.full.default):
        value = n.args[0] if n.target is aten.scalar_tensor.default else n.args[1]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                n.target is aten.scalar_tensor.default or list(n.args[0]) in ([], [1])):
            return float(value)
    return None


def _boolean_attention_mask(mask, node):
    """The boolean mask that PyTorch's conversion for cuDNN spelled as
    where(mask, 0, -65504) for `node`, a _scaled_dot_product_cudnn_attention,
    else None. The boolean mask means what the user wrote (masked keys at
    -inf: a fully masked row gives zeros, FlashAttention's convention, and
    flash-decoding does not load masked keys). Any other finite mask, e.g.
    Hugging Face's where(keep, 0, finfo.min), keeps its values: a fully
    masked row then averages V, as PyTorch computes it."""
    if node.target is not aten._scaled_dot_product_cudnn_attention.default:
        return None
    if not (isinstance(mask, torch.fx.Node) and mask.op == "call_function"
            and mask.target is aten.where.self and len(mask.args) == 3):
        return None
    cond, keep, drop = mask.args
    meta = _meta(cond) if isinstance(cond, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dtype != torch.bool:
        return None
    a, b = _scalar_constant(keep), _scalar_constant(drop)
    if a == 0.0 and b == _CUDNN_MASKED:
        return cond
    return None


# [B, H, S, D] (torch) <-> [B, S, H, D] (llm)
_HEADS_FIRST = (0, 2, 1, 3)


def _attention_operands(imp, q, k, dropout_p, is_causal):
    """Checks what llm's attention ops take; the query and key as Vals."""
    if dropout_p not in (0, 0.0, None):
        raise Unsupported("attention with dropout")
    q, k = imp.val(q), imp.val(k)
    if q.rank != 4 or k.rank != 4:
        raise Unsupported("attention inputs of rank other than 4")
    if q.dtype != k.dtype or q.dtype not in FLOAT_DTYPES:
        raise Unsupported("attention inputs of different or integer types")
    hq, hkv = q.shape[1], k.shape[1]
    if not (_is_static(hq) and _is_static(hkv)) or hq % hkv:
        raise Unsupported("attention heads: KV heads must divide query heads")
    if is_causal and not _same_dim(q.shape[2], k.shape[2]):
        # torch aligns the causal mask top-left, llm bottom-right: they agree
        # only when the query and key lengths are equal.
        raise Unsupported("causal attention with query and key lengths that may differ")
    return q, k


def _attention_attrs(is_causal, scale) -> str:
    attrs = []
    if is_causal:
        attrs.append("causal")
    if scale is not None:
        attrs.append(f"scale = {f64_literal(scale)} : f64")
    return (" {" + ", ".join(attrs) + "}") if attrs else ""


def _logsumexp(imp, node, qt, kt, mval, attr):
    """The attention statistics PyTorch's SDPA forward `node` returns as
    output 1, from llm.attention_logsumexp ([B, H, Sq] f32): as is for the
    flash kernels, [B, H, Sq, 1] for cuDNN's, [B, H, Sq'] with Sq' >= Sq
    for the efficient kernel's (padded to a multiple of 32 with +inf, as
    PyTorch's kernel pads; the backward never reads the padding)."""
    metas = _meta(node)
    want = metas[1] if isinstance(metas, (tuple, list)) and len(metas) > 1 else None
    if not isinstance(want, torch.Tensor) or want.dtype != torch.float32:
        return None
    b, sq, h = qt.shape[0], qt.shape[1], qt.shape[2]
    shape = (b, h, sq)
    got = imp.dims(want)
    pad = 0
    if len(got) == 4 and _same_dim(got[3], 1):
        target = got
    elif len(got) == 3:
        target = None
        if _is_static(got[2]) and _is_static(sq) and int(got[2]) > int(sq):
            pad = int(got[2]) - int(sq)  # the efficient kernel's rows, padded to 32
            got = got[:2] + (sq,)
    else:
        return None
    if not all(_same_dim(x, y) for x, y in zip(got, shape)):
        return None
    lse = imp.new(shape, torch.float32, "llm.attention_logsumexp",
                  lambda: f"{imp.ref(qt)}, {imp.ref(kt)}"
                          + (f" mask({imp.ref(mval)} : {mval.type})" if mval is not None else "")
                          + f"{attr} : {qt.type}, {kt.type} -> {tensor_type(shape, torch.float32)}")
    if pad:
        # Rows past Sq are never read (the backward takes the first Sq); the
        # efficient kernel writes +inf there (PyTorch's kernel_forward.h), and
        # so does llmc, so the statistics equal PyTorch's everywhere.
        inf = imp.broadcast(imp.constant(math.inf, torch.float32, (1, 1, 1)), (b, h, pad))
        return _concat(imp, [lse, inf], 2, (b, h, sq + pad), torch.float32)
    return imp.reshape(lse, target) if target is not None else lse


def _unused_rng_state(imp, node, index):
    """Output `index` of an SDPA forward without dropout that holds the RNG
    state for its backward's dropout (philox seed and offset; uint64 for
    the flash kernel, int64 for the others): torch.empty, never read when
    dropout_p is 0, so it becomes an Uninitialized output of its static
    shape and dtype. None when its meta is not a statically shaped tensor."""
    metas = _meta(node)
    m = metas[index] if isinstance(metas, (tuple, list)) and len(metas) > index else None
    if not isinstance(m, torch.Tensor) or not all(_is_static(d) for d in imp.dims(m)):
        return None
    return Uninitialized(tuple(int(d) for d in imp.dims(m)), m.dtype)


def _attention_mask(imp, node, mask, dtype):
    """The additive mask of an SDPA op `node` as a Val of `dtype`, or None."""
    if mask is None:
        return None
    cond = _boolean_attention_mask(mask, node)
    if cond is not None and isinstance(imp.env.get(cond), Val):  # imported here
        mask = cond
    m = imp.val(mask)
    if m.dtype == torch.bool:
        zero = imp.operand(0.0, dtype, m.shape)
        ninf = imp.operand(float("-inf"), dtype, m.shape)
        return _select(imp, m.shape, dtype, m, zero, ninf)
    if m.dtype not in FLOAT_DTYPES:
        raise Unsupported("attention mask of integer type")
    return m


def _attention(imp, node, q, k, v, mask, dropout_p, is_causal, scale, nouts, rng=()):
    q, k = _attention_operands(imp, q, k, dropout_p, is_causal)
    v = imp.val(v)
    if v.dtype != q.dtype or not _may_match(v.shape, k.shape):
        raise Unsupported("attention value of another shape or type than the key")
    perm = _HEADS_FIRST
    qt, kt, vt = imp.transpose(q, perm), imp.transpose(k, perm), imp.transpose(v, perm)
    mval = _attention_mask(imp, node, mask, q.dtype)
    attr = _attention_attrs(is_causal, scale)
    out_shape = qt.shape
    res = imp.new(out_shape, q.dtype, "llm.attention",
                  lambda: f"{imp.ref(qt)}, {imp.ref(kt)}, {imp.ref(vt)}"
                          + (f" mask({imp.ref(mval)} : {mval.type})" if mval is not None else "")
                          + f"{attr} : {qt.type}, {kt.type}, {vt.type}")
    out = imp.transpose(res, perm)
    outs = [out] + [None] * (nouts - 1)
    # Training: the statistics (and the unused RNG state) saved for
    # backward, built only when used (a cuDNN statistics reshape would
    # otherwise make an inference graph with dynamic shapes static).
    if _output_used(node, 1):
        outs[1] = _logsumexp(imp, node, qt, kt, mval, attr)
    for i in rng:
        if _output_used(node, i):
            outs[i] = _unused_rng_state(imp, node, i)
    return outs


def _output_used(node, index) -> bool:
    """Whether output `index` of the multi-output `node` is read."""
    return any(u.target is operator.getitem and u.args[1] == index and u.users
               for u in node.users)


@handles(aten._scaled_dot_product_flash_attention.default)
def _h_sdpa_flash(imp, node):
    a = bind_args(node)
    if a.get("return_debug_mask"):
        raise Unsupported("debug mask")
    return _attention(imp, node, a["query"], a["key"], a["value"], None,
                      a["dropout_p"], a["is_causal"], a["scale"], 9, rng=(6, 7))


@handles(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _h_sdpa_flash_cpu(imp, node):
    a = bind_args(node)
    return _attention(imp, node, a["query"], a["key"], a["value"], a["attn_mask"],
                      a["dropout_p"], a["is_causal"], a["scale"], 2)


@handles(aten._scaled_dot_product_efficient_attention.default)
def _h_sdpa_efficient(imp, node):
    a = bind_args(node)
    return _attention(imp, node, a["query"], a["key"], a["value"], a["attn_bias"],
                      a["dropout_p"], a["is_causal"], a["scale"], 4, rng=(2, 3))


@handles(aten._scaled_dot_product_cudnn_attention.default)
def _h_sdpa_cudnn(imp, node):
    a = bind_args(node)
    return _attention(imp, node, a["query"], a["key"], a["value"], a["attn_bias"],
                      a["dropout_p"], a["is_causal"], a["scale"], 9, rng=(6, 7))


@handles(aten.scaled_dot_product_attention.default)
def _h_sdpa(imp, node):
    a = bind_args(node)
    if a.get("enable_gqa"):
        pass  # llm.attention is GQA-aware: Hkv divides Hq
    return _attention(imp, node, a["query"], a["key"], a["value"], a["attn_mask"],
                      a["dropout_p"], a["is_causal"], a["scale"], 1)[0]


def _attention_backward(imp, node, grad_out, q, k, v, out, lse, mask, dropout_p,
                        is_causal, scale, nouts):
    """PyTorch's SDPA backward kernels -> llm.attention_backward: the
    gradients of query, key and value (outputs 0..2); a gradient of the mask
    (the efficient kernel's output 3) is not produced."""
    q, k = _attention_operands(imp, q, k, dropout_p, is_causal)
    v, o, do, l = imp.val(v), imp.val(out), imp.val(grad_out), imp.val(lse)
    if v.dtype != q.dtype or o.dtype != q.dtype or do.dtype != q.dtype:
        raise Unsupported("attention backward operands of different types")
    if v.rank != 4 or o.rank != 4 or do.rank != 4:
        raise Unsupported("attention backward operands of rank other than 4")
    if not (_may_match(v.shape, k.shape) and _may_match(o.shape, q.shape)
            and _may_match(do.shape, q.shape)):
        raise Unsupported("attention backward: value shaped unlike the key, or output "
                          "and its gradient unlike the query")
    b, h, sq = q.shape[0], q.shape[1], q.shape[2]
    if (len(l.shape) == 3 and _is_static(l.shape[2]) and _is_static(sq)
            and int(l.shape[2]) > int(sq)):
        l = _slice(imp, l, 2, 0, int(sq), 1)  # the efficient kernel's padded rows
    if l.dtype != torch.float32 or not (
            len(l.shape) in (3, 4) and all(_same_dim(x, y) for x, y in zip(l.shape, (b, h, sq)))
            and (len(l.shape) == 3 or _same_dim(l.shape[3], 1))):
        raise Unsupported(f"attention statistics (logsumexp) of shape {list(l.shape)}, "
                          f"expected [B, H, Sq] = {[b, h, sq]} in float32")
    if len(l.shape) == 4:
        l = imp.reshape(l, (b, h, sq))
    perm = _HEADS_FIRST
    qt, kt, vt = imp.transpose(q, perm), imp.transpose(k, perm), imp.transpose(v, perm)
    ot, dot_ = imp.transpose(o, perm), imp.transpose(do, perm)
    mval = _attention_mask(imp, node, mask, q.dtype)
    attr = _attention_attrs(is_causal, scale)
    grads = imp.new_results(
        [(qt.shape, q.dtype), (kt.shape, k.dtype), (vt.shape, v.dtype)],
        "llm.attention_backward",
        lambda: f"{imp.ref(qt)}, {imp.ref(kt)}, {imp.ref(vt)}, {imp.ref(ot)}, "
                f"{imp.ref(dot_)}, {imp.ref(l)}"
                + (f" mask({imp.ref(mval)} : {mval.type})" if mval is not None else "")
                + f"{attr} : {qt.type}, {kt.type}, {vt.type}, {ot.type}, {dot_.type}, {l.type}")
    return [imp.transpose(g, perm) for g in grads] + [None] * (nouts - 3)


# SDPA backward kernels: (grad_output argument, mask argument or None,
# number of outputs); the efficient kernel's 4th output is the mask's grad.
_SDPA_BACKWARDS = {
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: ("grad_out", "attn_mask", 3),
    aten._scaled_dot_product_flash_attention_backward.default: ("grad_out", None, 3),
    aten._scaled_dot_product_efficient_attention_backward.default: ("grad_out_", "attn_bias", 4),
    aten._scaled_dot_product_cudnn_attention_backward.default: ("grad_out", "attn_bias", 3),
}


@handles(*_SDPA_BACKWARDS)
def _h_sdpa_backward(imp, node):
    grad_name, mask_name, nouts = _SDPA_BACKWARDS[node.target]
    a = bind_args(node)
    return _attention_backward(imp, node, a[grad_name], a["query"], a["key"], a["value"],
                               a["out"], a["logsumexp"], a[mask_name] if mask_name else None,
                               a["dropout_p"], a["is_causal"], a["scale"], nouts)


# -- optimizer steps: _foreach_* (multi-tensor) ops ---------------------------------
#
# torch.optim's foreach implementations (AdamW, Adam, SGD with momentum, ...)
# apply one elementwise op to every tensor of a list. Each becomes one
# elementwise llm op per tensor, computed in float32 and rounded once to the
# tensor's type as PyTorch's foreach kernels do (opmath); codegen fuses each
# parameter's chain into its kernels. A list result is read through
# getitem, as split's.

def _item_metas(node):
    metas = _meta(node)
    if not isinstance(metas, (tuple, list)) or not all(isinstance(m, torch.Tensor) for m in metas):
        raise Unsupported("foreach result is not a list of tensors")
    return metas


def _ew(imp, op: str, m, *operands) -> Val:
    """The elementwise `op` of `operands` (Vals or Python numbers) in
    float32 at the shape of the tensor meta `m`."""
    shape, dtype = imp.dims(m), m.dtype
    _dtype_str(dtype)
    if dtype not in FLOAT_DTYPES:
        raise Unsupported(f"foreach {op} on {dtype}")
    f32 = torch.float32
    vals = [imp.operand(a, f32, shape) for a in operands]
    ty = tensor_type(shape, f32)
    return imp.new(shape, f32, op,
                   lambda: ", ".join(imp.ref(v) for v in vals) + f" : {ty}")


def _item(imp, v: Val, m) -> Val:
    """A foreach result, rounded once to its tensor's type."""
    return imp.cast(v, m.dtype)


def _foreach_list(imp, a, n: int, what: str) -> list:
    """A foreach operand as n items: a list of tensors, or one scalar, one
    0-dim tensor or a list of scalars broadcast to every item."""
    if isinstance(a, (list, tuple)):
        if len(a) != n:
            raise Unsupported(f"foreach {what} of {len(a)} items for {n} tensors")
        return [imp.val(x) if isinstance(x, torch.fx.Node) else _number(x, what) for x in a]
    if isinstance(a, torch.fx.Node):
        return [imp.val(a)] * n
    return [_number(a, what)] * n


def _number(x, what):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise Unsupported(f"foreach {what}: {type(x).__name__} (numbers and tensors are supported)")
    return x


_FOREACH_BINARY = {aten._foreach_add: "llm.add", aten._foreach_sub: "llm.sub",
                   aten._foreach_mul: "llm.mul", aten._foreach_div: "llm.div",
                   aten._foreach_maximum: "llm.maximum", aten._foreach_minimum: "llm.minimum",
                   aten._foreach_pow: "llm.pow"}
_FOREACH_UNARY = {aten._foreach_neg: "llm.neg", aten._foreach_sqrt: "llm.sqrt",
                  aten._foreach_exp: "llm.exp", aten._foreach_log: "llm.log",
                  aten._foreach_abs: "llm.abs", aten._foreach_rsqrt: "llm.rsqrt",
                  aten._foreach_sigmoid: "llm.sigmoid", aten._foreach_tanh: "llm.tanh"}


def _foreach_targets(packets):
    return [getattr(p, o) for p in packets for o in p.overloads()
            if not o.endswith("_") and "out" not in o]


@handles(*_foreach_targets(_FOREACH_BINARY))
def _h_foreach_binary(imp, node):
    """_foreach_<op>.Scalar/.List/.Tensor/.ScalarList(self, other[, alpha])
    and _foreach_pow.ScalarAndTensor(scalar, exponents)."""
    op = _FOREACH_BINARY[node.target.overloadpacket]
    metas = _item_metas(node)
    args = bind_args(node)
    n = len(metas)
    if node.target is aten._foreach_pow.ScalarAndTensor:
        base = [_number(args["self"], "base")] * n
        other = _foreach_list(imp, args["exponent"], n, "exponent")
        return [_item(imp, _ew(imp, op, m, a, b), m) for m, a, b in zip(metas, base, other)]
    names = list(args)
    selfs = _foreach_list(imp, args[names[0]], n, "self")
    other = _foreach_list(imp, args[names[1]], n, "operand")
    alpha = args.get("alpha", 1)
    if alpha is not None and alpha != 1:
        other = [_ew(imp, "llm.mul", m, b, _number(alpha, "alpha")) for m, b in zip(metas, other)]
    return [_item(imp, _ew(imp, op, m, a, b), m) for m, a, b in zip(metas, selfs, other)]


@handles(*_foreach_targets(_FOREACH_UNARY), *_foreach_targets([aten._foreach_reciprocal]))
def _h_foreach_unary(imp, node):
    metas = _item_metas(node)
    xs = _foreach_list(imp, node.args[0], len(metas), "self")
    if node.target.overloadpacket is aten._foreach_reciprocal:
        return [_item(imp, _ew(imp, "llm.div", m, 1.0, x), m) for m, x in zip(metas, xs)]
    op = _FOREACH_UNARY[node.target.overloadpacket]
    return [_item(imp, _ew(imp, op, m, x), m) for m, x in zip(metas, xs)]


@handles(*_foreach_targets([aten._foreach_lerp]))
def _h_foreach_lerp(imp, node):
    """torch.lerp per item with PyTorch's two formulas: self + w * (end -
    self) for |w| < 0.5, end - (end - self) * (1 - w) otherwise (so w = 1
    gives end exactly); a tensor weight chooses per element."""
    metas = _item_metas(node)
    args = bind_args(node)
    n = len(metas)
    selfs = _foreach_list(imp, args["self"], n, "self")
    ends = _foreach_list(imp, args["tensors1"], n, "end")
    ws = _foreach_list(imp, args["weight"] if "weight" in args else args["weights"], n, "weight")
    out = []
    for m, s, e, w in zip(metas, selfs, ends, ws):
        d = _ew(imp, "llm.sub", m, e, s)
        low = _ew(imp, "llm.add", m, s, _ew(imp, "llm.mul", m, d, w))
        high = _ew(imp, "llm.sub", m, e, _ew(imp, "llm.mul", m, d, _ew(imp, "llm.sub", m, 1.0, w)))
        if isinstance(w, (int, float)):
            r = low if abs(w) < 0.5 else high
        else:
            shape = imp.dims(m)
            aw = _ew(imp, "llm.abs", m, w)
            half = imp.operand(0.5, torch.float32, shape)
            small = imp.new(shape, torch.bool, "llm.compare",
                            lambda aw=aw, half=half: f"lt, {imp.ref(aw)}, {imp.ref(half)} : {aw.type}")
            r = _select(imp, shape, torch.float32, small, low, high)
        out.append(_item(imp, r, m))
    return out


@handles(*_foreach_targets([aten._foreach_addcmul, aten._foreach_addcdiv]))
def _h_foreach_addc(imp, node):
    """self + value * t1 * t2 (addcmul) or self + value * t1 / t2 (addcdiv)."""
    metas = _item_metas(node)
    args = bind_args(node)
    n = len(metas)
    selfs = _foreach_list(imp, args["self"], n, "self")
    t1 = _foreach_list(imp, args["tensor1"], n, "tensor1")
    t2 = _foreach_list(imp, args["tensor2"], n, "tensor2")
    value = args.get("value", args.get("scalars", 1))
    if isinstance(value, torch.fx.Node):
        # .Tensor: a 1-D tensor with one value per item.
        sv = imp.val(value)
        if sv.rank != 1 or not _same_dim(sv.shape[0], n):
            raise Unsupported(f"foreach scalars of shape {list(sv.shape)} for {n} tensors")
        vs = [imp.reshape(_slice(imp, sv, 0, i, i + 1, 1), ()) for i in range(n)]
    else:
        vs = _foreach_list(imp, value, n, "value")
    op = "llm.mul" if node.target.overloadpacket is aten._foreach_addcmul else "llm.div"
    out = []
    for m, s, a, b, v in zip(metas, selfs, t1, t2, vs):
        prod = _ew(imp, op, m, a, b)
        if not (isinstance(v, (int, float)) and v == 1):
            prod = _ew(imp, "llm.mul", m, prod, v)
        out.append(_item(imp, _ew(imp, "llm.add", m, s, prod), m))
    return out


FOREACH_OPS = set(_foreach_targets([*_FOREACH_BINARY, *_FOREACH_UNARY, aten._foreach_reciprocal,
                                    aten._foreach_lerp, aten._foreach_addcmul,
                                    aten._foreach_addcdiv]))


MULTI_OUTPUT = {
    aten.native_layer_norm.default,
    aten.native_dropout.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_cudnn_attention_backward.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
}


# ---------------------------------------------------------------------------
# Support check and whole-graph import


def _hint(x) -> Optional[int]:
    """An int, or a SymInt's example value (None without one)."""
    if isinstance(x, torch.SymInt):
        h = x.node.hint
        return None if h is None else int(h)
    return int(x)


def dense_permutation(m: torch.Tensor) -> Optional[Tuple[int, ...]]:
    """The dimension order, outermost first, of a tensor laid out densely in
    another order than its own: a transposed weight ([k, n] strides (1, k)),
    a [B, S, H, D] buffer read as [B, H, S, D]. `m.permute(perm)` is then
    contiguous. None for a contiguous tensor and for one that is not a
    permuted dense tensor (a broadcast, a slice, overlapping); decided on the
    example sizes of symbolic dimensions (the backend checks every call's
    tensors and copies what does not match)."""
    if m.dim() < 2:
        return None
    sizes = [_hint(d) for d in m.shape]
    strides = [_hint(d) for d in m.stride()]
    if None in sizes or None in strides:
        return None
    perm = tuple(sorted(range(m.dim()), key=lambda d: (-strides[d], d)))
    expect = 1
    for d in reversed(perm):
        if sizes[d] > 1 and strides[d] != expect:
            return None
        expect *= sizes[d]
    if all(sizes[d] <= 1 or (perm.index(d) == d) for d in range(m.dim())):
        return None  # contiguous up to size-1 dimensions
    return perm


def inverse_permutation(perm: Sequence[int]) -> Tuple[int, ...]:
    inv = [0] * len(perm)
    for k, p in enumerate(perm):
        inv[p] = k
    return tuple(inv)


# Views that only reorder dimensions: an output made of them over a
# placeholder is returned as PyTorch's view of the input.
_PERMUTING_VIEWS = (aten.permute.default, aten.t.default, aten.transpose.int,
                    aten.alias.default)


def _placeholder_view(node) -> Optional[Tuple[torch.fx.Node, Tuple[int, ...]]]:
    """(placeholder, perm) when `node` is `placeholder.permute(perm)` through
    one or more permuting views (permute, t, transpose, alias); else None."""
    chain = []
    while (isinstance(node, torch.fx.Node) and node.op == "call_function"
           and node.target in _PERMUTING_VIEWS):
        chain.append(node)
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return None
    m = _meta(node)
    if not isinstance(m, torch.Tensor):
        return None
    perm = list(range(m.dim()))
    for v in reversed(chain):
        if v.target is aten.permute.default:
            perm = [perm[_norm_dim(d, len(perm))] for d in v.args[1]]
        elif v.target is aten.t.default:
            perm = perm[::-1] if len(perm) == 2 else perm
        elif v.target is aten.transpose.int:
            a, b = (_norm_dim(d, max(len(perm), 1)) for d in v.args[1:3])
            if len(perm):
                perm[a], perm[b] = perm[b], perm[a]
    return node, tuple(perm)


def _arg_tensor_meta(n: torch.fx.Node):
    m = _meta(n)
    return m if isinstance(m, torch.Tensor) else None


def check_node(node: torch.fx.Node) -> Optional[str]:
    """None when the importer can translate `node` in isolation, else why not."""
    if node.op != "call_function":
        return "not a call"
    if node.target is operator.getitem:
        src = node.args[0]
        if isinstance(src, torch.fx.Node) and src.target in MULTI_OUTPUT:
            return check_node(src)
        if isinstance(src, torch.fx.Node) and (src.target in SPLIT_OPS
                                               or src.target in FOREACH_OPS):
            return check_node(src)
        return "getitem"
    imp = Importer()
    # Found only if a symbolic size needs them: computing them for every
    # node of a static graph made partitioning quadratic (the 1B training
    # backward: 2483 nodes x 600 placeholders).
    imp._symbols_graph = node.graph
    for inp in node.all_input_nodes:
        m = _arg_tensor_meta(inp)
        if m is None:
            continue  # SymInt or scalar operands are checked by the handler
        try:
            _dtype_str(m.dtype)
        except Unsupported as e:
            imp.env[inp] = Unreadable(str(e))  # fine unless the handler reads it
            continue
        try:
            imp.env[inp] = Val(imp.dims(m), m.dtype, name=f"%{inp.name}")
        except Unsupported as e:
            return str(e)
    if node.target in MULTI_OUTPUT:
        for u in node.users:
            if u.target is not operator.getitem:
                return f"{op_name(node)}: its tuple is used whole"
    try:
        results = imp.run_node(node)
        if node.target in MULTI_OUTPUT:
            # Every output that is used must be produced.
            for u in node.users:
                i = u.args[1]
                if u.users and (not isinstance(results, (list, tuple)) or i >= len(results)
                                or results[i] is None):
                    return f"{op_name(node)}: auxiliary output {i} is used (training)"
        if (node.target not in MULTI_OUTPUT and node.target not in SPLIT_OPS
                and node.target not in FOREACH_OPS):
            m = _meta(node)
            if not isinstance(m, torch.Tensor):
                return "result is not a tensor"
    except Unsupported as e:
        return str(e)
    except NeedsStatic:
        return None  # the backend imports it per concrete shape
    except Exception as e:  # a bug in a handler must not break compilation
        return f"importer error: {type(e).__name__}: {e}"
    return None


def _is_tangent(ph: torch.fx.Node) -> bool:
    """True for a floating-point tangent of AOTAutograd's backward graph
    (placeholders `tangents_<i>`): a gradient flowing backward, marked
    `llm.gradient` so that the fp8 policy quantizes GEMM operands computed
    from it to e5m2 (Transformer Engine's HYBRID format)."""
    m = _arg_tensor_meta(ph)
    return ph.name.startswith("tangents_") and m is not None and m.dtype.is_floating_point


def import_graph(gm: torch.fx.GraphModule, func_name: str = "main",
                 bindings: Optional[Dict[str, int]] = None,
                 donate: Union[Sequence[int], Dict[int, int]] = ()) -> ImportResult:
    """Translates a whole GraphModule (every call must be supported).

    With `bindings` (symbol name -> size) every dimension is concrete. The
    placeholders (by index) in `donate` become `llm.donate` arguments: the
    compiled code may update them in place (a KV cache AOTAutograd copies
    back anyway); given as {placeholder: FX output index of its new value},
    such an argument also names the result its buffer may hold
    (`llm.aliasing_output`). Raises Unsupported or NeedsStatic."""
    imp = Importer(bindings=bindings, gm=gm)
    args_sig: List[str] = []
    arg_types: List[str] = []
    arg_attrs: List[List[str]] = []
    arg_placeholders: List[int] = []
    dim_bindings: Dict[str, Tuple[int, int]] = {}
    arg_perms: Dict[int, Tuple[int, ...]] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for pi, ph in enumerate(placeholders):
        m = _arg_tensor_meta(ph)
        if m is None:
            continue  # SymInt inputs: their values are the shapes of the tensors
        try:
            _dtype_str(m.dtype)
        except Unsupported as e:
            imp.env[ph] = Unreadable(str(e))  # not an argument; reading it is Unsupported
            continue
        dims = imp.dims(m)
        ai = len(args_sig)
        # A permuted dense input (a transposed weight saved by the forward)
        # is taken in memory order and transposed back inside the function,
        # where the transpose folds into its consumer (a GEMM's transpose
        # flag, another transpose) instead of PyTorch copying it every call.
        perm = dense_permutation(m) if pi not in donate else None
        if perm is not None:
            arg_perms[ai] = perm
            dims = [dims[d] for d in perm]
        else:
            perm = tuple(range(len(dims)))
        v = Val(tuple(dims), m.dtype, name=f"%arg{ai}", is_arg=True)
        imp.env[ph] = imp.transpose(v, inverse_permutation(perm))
        names = []
        for di, d in enumerate(dims):
            if _is_static(d):
                continue
            nm = str(d) if isinstance(d, sympy.Symbol) else f"a{ai}_d{di}"
            names.append(nm)
            dim_bindings.setdefault(nm, (ai, perm[di]))
        attrs = []
        if names:
            attrs.append("llm.dim_names = [" + ", ".join(f'"{n}"' for n in names) + "]")
        if pi in donate:
            attrs.append("llm.donate")
        if _is_tangent(ph):
            attrs.append("llm.gradient")
        args_sig.append(f"%arg{ai}: {v.type}")
        arg_types.append(v.type)
        arg_attrs.append(attrs)
        arg_placeholders.append(pi)

    output_node = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            output_node = node
            break
        if node.op == "get_attr":
            raise Unsupported("get_attr inside an llmc subgraph")
        if node.op != "call_function":
            raise Unsupported(f"{node.op} node")
        m = _meta(node)
        if isinstance(m, (torch.SymInt, int)) and not isinstance(m, bool):
            continue  # shape arithmetic: shapes come from the metadata
        imp.env[node] = imp.run_node(node)

    outs = output_node.args[0]
    single = not isinstance(outs, (tuple, list))
    if single:
        outs = [outs]
    results: List[Val] = []
    returned: List[Val] = []   # results[i] in memory order (out_perms)
    out_perms: Dict[int, Tuple[int, ...]] = {}
    out_map: List[Tuple[str, Optional[int]]] = []
    ph_index = {ph: i for i, ph in enumerate(placeholders)}
    for o in outs:
        if o is None:
            out_map.append(("none", None))
            continue
        if isinstance(o, torch.fx.Node) and o.op == "placeholder" and o in ph_index \
                and isinstance(imp.env.get(o), Val):
            out_map.append(("arg", ph_index[o]))
            continue
        view = _placeholder_view(o)
        if view is not None and ph_index[view[0]] not in donate \
                and isinstance(imp.env.get(view[0]), Val):
            out_map.append(("argview", (ph_index[view[0]], view[1])))
            continue
        v = imp.env.get(o)
        if isinstance(v, Uninitialized):
            out_map.append(("empty", v))
            continue
        if not isinstance(v, Val):
            raise Unsupported(f"output {o} is not a tensor")
        if v in results:
            out_map.append(("out", results.index(v)))
            continue
        m = _meta(o)
        perm = dense_permutation(m) if isinstance(m, torch.Tensor) else None
        r = imp.transpose(v, perm) if perm is not None and v.rank == len(perm) else v
        if r.is_arg:
            # An input returned through a clone (and views that only reorder
            # its dims): a copy of the input, in the FX output's dim order
            # `input.permute(q)`; r is the argument in memory order, so
            # output.permute(perm) == input.permute(arg_perm).
            ai = int(r.name[len("%arg"):])
            arg_perm = arg_perms.get(ai, tuple(range(r.rank)))
            inv_out = inverse_permutation(perm) if r is not v else tuple(range(r.rank))
            q = tuple(arg_perm[i] for i in inv_out)
            if q == tuple(range(r.rank)):
                out_map.append(("arg", arg_placeholders[ai]))
            else:
                out_map.append(("argcopy", (arg_placeholders[ai], q)))
            continue
        if r is not v:
            out_perms[len(results)] = inverse_permutation(perm)
        results.append(v)
        returned.append(r)
        out_map.append(("out", len(results) - 1))
    if not results:
        raise Unsupported("subgraph computes nothing")
    # A donated input whose new value is output k (`donate` as a dict):
    # llm.aliasing_output names the result that its buffer may hold when
    # that result is computed here with the argument's type, in memory order.
    # Not when another output is the argument's own old value (a clone of
    # it is ("arg", pi): no MLIR op reads it, so the lowering would not see
    # that read) or when the result is also another output.
    if isinstance(donate, dict):
        old_values = {o[1] if o[0] == "arg" else o[1][0] for o in out_map
                      if o[0] in ("arg", "argcopy", "argview")}
        for ai, pi in enumerate(arg_placeholders):
            k = donate.get(pi)
            if k is None or k >= len(out_map) or out_map[k][0] != "out" or pi in old_values:
                continue
            r = out_map[k][1]
            if (r not in out_perms and out_map.count(("out", r)) == 1
                    and returned[r].type == arg_types[ai]):
                arg_attrs[ai].append(f"llm.aliasing_output = {r} : i64")
    args_sig = [a + (" {" + ", ".join(attrs) + "}" if attrs else "")
                for a, attrs in zip(args_sig, arg_attrs)]
    names = [imp.ref(v) for v in returned]
    ret_types = ", ".join(v.type for v in returned)
    if imp.seed is not None:
        args_sig.append("%rng_seed: tensor<i64>")
    body = "\n".join(imp.lines)
    sig = ",\n    ".join(args_sig)
    rt = ret_types if len(results) == 1 else f"({ret_types})"
    text = (f"func.func @{func_name}(\n    {sig}) -> {rt} {{\n{body}\n"
            f"    return {', '.join(names)} : {ret_types}\n}}\n")
    return ImportResult(text=text, func_name=func_name, arg_placeholders=arg_placeholders,
                        dim_bindings=dim_bindings, outputs=out_map,
                        dynamic=bindings is None and bool(dim_bindings), ops=imp.ops,
                        single_output=single, rng_seed=imp.seed is not None,
                        arg_perms=arg_perms, out_perms=out_perms)


def supported_aten_ops() -> List[str]:
    """The ATen overloads with a translation (for docs and the report)."""
    out = []
    for t in HANDLERS:
        if isinstance(t, torch._ops.OpOverload):
            out.append(f"{t.namespace}.{t._schema.name.split('::')[-1]}.{t._overloadname}")
    return sorted(out)
