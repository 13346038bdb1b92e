"""Shape bucketing of dynamic dimensions: is padding a dimension exact?

llmc's kernels are specialized to every dimension, so a subgraph with a
dynamic sequence length would be compiled once per length. With bucketing
the backend compiles once per bucket B (`bucket_size`) and runs a length-L
input by padding the dynamic dimension to B at the end and slicing the
outputs back to L. That is exact only if no real position (index < L along
the padded dimension) can see a padded one. `analyze` decides it per
subgraph and per dynamic symbol, conservatively, on the partition's ATen FX
graph (the same graph the importer translates; see "Why FX" below).

The analysis is an abstract interpretation. Every tensor value carries:
  * for every axis, its factors in row-major order (`(2, s)` for an axis
    made by merging [2, s]), so reshapes that merge or split around the
    padded factor are followed exactly and others are refused;
  * `dirty`: real positions may differ from the unpadded computation;
  * facts about masks, each for a (query axis, key axis) pair:
      pos    integer input whose value is `position along one axis + c`
             (checked on the actual input at run time, see `Plan`),
      cmask  boolean, False wherever the query index is real and the key
             index padded (`k_pos <= q_pos` and conjunctions with it),
      nmask  float, -inf there (`where(cmask, x, -inf)`, plus finite terms),
      zmask  float, exactly 0 there (softmax over the key axis of an nmask).
Rules:
  * elementwise ops, broadcasts, casts: positions stay independent;
  * reductions (any included), softmax, norms over a padded axis: unsafe
    (zmask excepted); cumsum: safe along any axis (a prefix reads no later
    position);
  * matmul: a padded M or N axis is fine, a padded contraction axis unsafe
    unless the padded entries of one operand are zmask zeros;
  * attention: padded batch/heads/query rows are fine; padded keys only with
    `is_causal` and equal query and key lengths, or an nmask on the key axis;
  * gathers (embedding, index_select): padded index positions are fine (the
    padding repeats the last real index, a valid one); a pos input used as
    an index is not padded that way, so it is refused;
  * slices/cat/select/split along a padded axis (other than the whole
    axis): unsafe, except an append: cat along the padded axis of a first
    piece padded there (size s + c) and others static along it (a KV cache
    grown by `cat`, Hugging Face's default dynamic cache);
  * attention over padded keys that no causal mask or nmask hides (a
    decode step's query attends to every cached key): exact once the keys
    past the real length are masked, see "Rewrites" below;
  * any op not listed: unsafe.
Outputs must be clean; padded axes of outputs are sliced back.

Exactness also needs the padded rows to stay finite (0 * inf = NaN in
P @ V): the padding repeats the last real row along the padded axis, so every
padded row computes what a real row computes and is as finite as the real
ones (only the masked attention keys see it, with weight exactly 0).

Rewrites. Two forms are exact only after `rewrite` changes the graph the
backend imports (PyTorch's fallback keeps running the original): an append
`cat([cache, new], d)` becomes the cat followed by `index_put` of `new` at
the cache's real length (a run-time position: padded, the cat alone would
put `new` after the padding), and an attention over padded keys gets an
additive key mask, 0 for the real keys [0, s + c) and -inf for the rest.
The real length and the mask are extra inputs the backend appends to every
call (`Extra`). Attentions whose key and value lengths are different
symbols (Dynamo gives every layer's cache its own) are bucketed only when
the symbols are equal at run time. Such related symbols are linked
(`Plan.links`: s' = s + d, d from the traced sizes): s' is padded to s's
bucket + d and every call checks the relation (else it runs in PyTorch).
The same links let a gather read a padded table at positions of another
symbol (Hugging Face's padding mask `attention_mask[b, kv_positions]`).
A bucketed symbol used as a value (Hugging Face's `cache_position =
arange(1) + past_length`) would be the padded size in the padded graph:
`rewrite` replaces it by the real length input, and a slice of the last k
positions (generate()'s `hidden[:, -1:]` before the LM head) by a gather
at the real length. With these, a decode step
of a dynamic cache compiles once per bucket of the cache length instead of
once per token.

Why FX and Python, not a C++ pass: the decision is about the plugin's own
glue (which inputs to pad how, which outputs to slice, which integer inputs
are positions to be checked at run time), it needs the FX graph's symbolic
shapes (the llm IR only has `?`), and it must run before anything is
compiled; the compiler's SpecializationCache buckets at run time but cannot
know whether a graph tolerates padding.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import sympy
import torch
import torch.fx

from . import importer

aten = torch.ops.aten
prims = torch.ops.prims

INT_MAX = 9223372036854775807


class Unsafe(Exception):
    """Padding is not (provably) exact; the message names the node and why."""


# --- buckets -------------------------------------------------------------------------

Buckets = Union[str, int, Sequence[int]]


def parse_buckets(spec) -> Buckets:
    """'none', 'pow2', a positive int (multiples of it) or a sorted list of sizes."""
    if spec in ("none", "pow2", None, False):
        return "none" if spec in (None, False) else spec
    if isinstance(spec, bool):
        return "pow2" if spec else "none"
    if isinstance(spec, int) and spec > 0:
        return spec
    if isinstance(spec, (list, tuple)) and spec and all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in spec):
        return tuple(sorted(set(spec)))
    raise ValueError(f"llmc: dynamic_buckets must be 'none', 'pow2', a positive int "
                     f"(multiples) or a list of positive sizes, got {spec!r}")


POW2_MIN = 16


def bucket_size(n: int, spec: Buckets) -> Optional[int]:
    """The bucket for size `n`, or None (no bucketing: compile `n` exactly)."""
    if spec == "none" or n <= 0:
        return None
    if spec == "pow2":
        return max(POW2_MIN, 1 << (n - 1).bit_length())
    if isinstance(spec, int):
        return -(-n // spec) * spec
    for b in spec:
        if b >= n:
            return b
    return None  # above the largest bucket: exact


def describe_buckets(spec: Buckets) -> str:
    if spec == "pow2":
        return f"powers of two from {POW2_MIN}"
    if isinstance(spec, int):
        return f"multiples of {spec}"
    return "sizes " + ",".join(str(b) for b in spec)


# --- abstract values -------------------------------------------------------------------

Factors = Tuple[sympy.Expr, ...]


@dataclass(frozen=True)
class AV:
    axes: Tuple[Factors, ...]
    dirty: bool = False
    pos: Optional[int] = None            # axis
    pos_src: FrozenSet[int] = frozenset()
    cmask: Optional[Tuple[int, int]] = None
    nmask: Optional[Tuple[int, int]] = None
    zmask: Optional[Tuple[int, int]] = None
    neginf: bool = False                 # every element is -inf
    pos_off: int = 0                     # pos: graph-level offset c in `position + c`

    @property
    def rank(self) -> int:
        return len(self.axes)


def _expr(d) -> sympy.Expr:
    if isinstance(d, torch.SymInt):
        return d.node.expr
    return sympy.Integer(int(d))


def affine(e, syms) -> Optional[Tuple[sympy.Symbol, int]]:
    """(s, c) when `e` is s + c for a symbol s of `syms` and an integer c."""
    e = sympy.sympify(e)
    for sym in e.free_symbols:
        if sym in syms:
            c = sympy.expand(e - sym)
            if c.is_Integer:
                return sym, int(c)
    return None


def _is_one(f) -> bool:
    return f == 1


def _eq(a, b) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def _prod(fs) -> sympy.Expr:
    p = sympy.Integer(1)
    for f in fs:
        p = p * f
    return sympy.expand(p)


class Analysis:
    def __init__(self, gm: torch.fx.GraphModule, syms: Set[sympy.Symbol]):
        self.gm = gm
        self.syms = set(syms)
        self.env: Dict[torch.fx.Node, object] = {}
        self.pos_inputs: Set[int] = set()        # placeholders whose pos fact was used
        self.index_inputs: Set[int] = set()      # placeholders used as gather indices
        self.mask_inputs: Set[int] = set()       # placeholders padded as causal masks
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.appends: List[torch.fx.Node] = []   # cat nodes rewritten as appends
        self.key_masks: List[Tuple[torch.fx.Node, sympy.Symbol, int]] = []  # (attention, s, c)
        # Linked symbols: s' -> (s, d) with s' = s + d at run time.
        self.links: Dict[sympy.Symbol, Tuple[sympy.Symbol, int]] = {}
        # (node, argument position, symbol, c): a bucketed size s + c used as
        # a value, replaced by the real length by `rewrite`.
        self.value_uses: List[Tuple[torch.fx.Node, int, sympy.Symbol, int]] = []
        self.hints = _hints(gm)
        self.zero_pos = False   # position inputs must be arange + 0 (see _elementwise)
        self.size_limits: Dict[sympy.Symbol, int] = {}  # root symbol -> largest padded size
        # (slice node, s, c): x[..., -k:, ...] along an axis s + c, gathered
        # at the real length by `rewrite`.
        self.tail_slices: List[Tuple[torch.fx.Node, sympy.Symbol, int]] = []

    # -- helpers --------------------------------------------------------------------
    def padded_factor(self, f) -> bool:
        return bool(getattr(f, "free_symbols", set()) & self.syms)

    def padded_axis(self, factors: Factors) -> bool:
        return any(self.padded_factor(f) for f in factors)

    def padded_axes(self, av: AV) -> List[int]:
        return [i for i, a in enumerate(av.axes) if self.padded_axis(a)]

    def fail(self, node, why: str):
        raise Unsafe(f"{node.name} ({importer.op_name(node)}): {why}")

    def root(self, s: sympy.Symbol) -> Tuple[sympy.Symbol, int]:
        """(r, d) with s = r + d through the links."""
        d = 0
        while s in self.links:
            s, dd = self.links[s]
            d += dd
        return s, d

    def link(self, node, a: sympy.Symbol, b: sympy.Symbol, d: int) -> None:
        """Records a = b + d at run time (checked per call); fails when the
        traced sizes disagree or another link contradicts it."""
        ra, da = self.root(a)
        rb, db = self.root(b)
        if ra == rb:
            if da != db + d:
                self.fail(node, f"{a} = {b} + {d} contradicts another relation of the sizes")
            return
        ha, hb = self.hints.get(ra), self.hints.get(rb)
        if ha is None or hb is None or ha + da != hb + db + d:
            self.fail(node, f"needs {a} = {b} + {d}, which the traced sizes do not show")
        self.links[ra] = (rb, db + d - da)

    def av(self, a) -> Optional[AV]:
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            return v if isinstance(v, AV) else None
        return None

    def meta_axes(self, node, like: Sequence[AV] = ()) -> Tuple[Factors, ...]:
        """The result's axes: an axis of the same size of a `like` value
        (aligned to the right, as broadcasting does) keeps its factors."""
        m = importer._meta(node)
        if isinstance(m, (tuple, list)):
            m = m[0]
        dims = [_expr(d) for d in m.shape]
        out = []
        for i, e in enumerate(dims):
            f = None
            if not _is_one(e):
                for v in like:
                    j = i - (len(dims) - v.rank)
                    if 0 <= j < v.rank and v.axes[j] and _eq(_prod(v.axes[j]), e):
                        f = v.axes[j]
                        break
            out.append(f if f is not None else self.leaf_factors(node, e))
        return tuple(out)

    def leaf_factors(self, node, e) -> Factors:
        if _is_one(e):
            return ()
        if self.padded_factor(e) and affine(e, self.syms) is None:
            self.fail(node, f"dimension {e} mixes a padded symbol into an expression")
        return (e,)

    # -- axis maps of view-like ops ---------------------------------------------------
    def remap(self, av: AV, new_axes, amap) -> AV:
        """`amap[i]` = the output axis of input axis i (None: dropped)."""
        def m(a):
            return None if a is None else amap[a]

        def m2(p):
            if p is None:
                return None
            q, k = m(p[0]), m(p[1])
            return None if q is None or k is None else (q, k)
        return AV(tuple(new_axes), av.dirty, m(av.pos), av.pos_src if m(av.pos) is not None
                  else frozenset(), m2(av.cmask), m2(av.nmask), m2(av.zmask), av.neginf,
                  av.pos_off if m(av.pos) is not None else 0)

    def broadcast_to(self, av: AV, rank: int) -> AV:
        lead = rank - av.rank
        amap = {i: i + lead for i in range(av.rank)}
        return self.remap(av, ((),) * lead + av.axes, amap)

    # -- the walk -----------------------------------------------------------------------
    def run(self) -> None:
        for pi, ph in enumerate(self.placeholders):
            m = importer._meta(ph)
            if not isinstance(m, torch.Tensor):
                self.env[ph] = m
                continue
            axes = tuple(self.leaf_factors(ph, _expr(d)) for d in m.shape)
            pos = None
            if not m.dtype.is_floating_point and m.dtype != torch.bool:
                padded = [i for i, a in enumerate(axes) if self.padded_axis(a)]
                others = [a for i, a in enumerate(axes) if i not in padded and a != ()]
                if len(padded) == 1 and not others and axes[padded[0]] in [(s,) for s in self.syms]:
                    pos = padded[0]
            av = AV(axes, pos=pos, pos_src=frozenset([pi]) if pos is not None
                    else frozenset())
            if mask_input(m, self.syms) is not None:
                # Padded as a causal mask (see pad_tensor): by construction
                # False (-inf) for real query rows and padded key columns.
                r = len(axes)
                fact = {"cmask" if m.dtype == torch.bool else "nmask": (r - 2, r - 1)}
                av = replace(av, **fact)
                self.mask_inputs.add(pi)
            self.env[ph] = av
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                self.check_outputs(node)
                break
            if node.op != "call_function":
                self.fail(node, f"{node.op} node")
            m = importer._meta(node)
            if isinstance(m, (torch.SymInt, int)) and not isinstance(m, bool):
                self.env[node] = m
                continue
            self.env[node] = self.transfer(node)

    def check_outputs(self, node):
        outs = node.args[0]
        outs = outs if isinstance(outs, (tuple, list)) else [outs]
        for o in outs:
            v = self.av(o)
            if v is None:
                continue
            if v.dirty:
                self.fail(o, "an output's real positions depend on padded ones")
            for a in v.axes:
                if self.padded_axis(a) and len(a) != 1:
                    self.fail(o, f"output axis {a} merges the padded dimension")

    # -- transfer functions -------------------------------------------------------------
    def transfer(self, node) -> object:
        t = node.target
        if t is operator.getitem:
            src = self.env.get(node.args[0])
            if isinstance(src, (tuple, list)):
                return src[node.args[1]]
            self.fail(node, "getitem of a non-tuple")
        h = _TRANSFER.get(t)
        if h is None:
            h = _TRANSFER.get(getattr(t, "overloadpacket", None))
        if h is None:
            self.fail(node, "no padding rule for this op")
        return h(self, node)


# Elementwise ------------------------------------------------------------------------------

def _operands(an: Analysis, node) -> List[object]:
    return [a for a in list(node.args) + list(node.kwargs.values())]


def _pos_axis(an: Analysis, v: AV) -> Optional[Tuple[sympy.Symbol, int]]:
    """(root symbol, offset) of the axis along which `v` holds positions,
    when it is one factor s + a of a bucketed symbol (a includes the link
    of s to its root)."""
    lin = _single_affine(an, v.axes[v.pos]) if v.pos is not None else None
    if lin is None:
        return None
    r, d = an.root(lin[0])
    return r, lin[1] + d


def _size_values(an: Analysis, node) -> None:
    """Records every operand of `node` that is a bucketed size s + c used as
    a value (see the module doc), or fails for another expression."""
    for i, a in enumerate(node.args):
        if not isinstance(a, torch.fx.Node):
            continue
        v = an.env.get(a)
        if not isinstance(v, torch.SymInt) or not an.padded_factor(v.node.expr):
            continue
        lin = affine(v.node.expr, an.syms)
        if lin is None:
            an.fail(node, f"size {v.node.expr} used as a value")
        an.value_uses.append((node, i, lin[0], lin[1]))


def _elementwise(an: Analysis, node) -> AV:
    _size_values(an, node)
    rank = importer._meta(node).dim()
    ins = [an.broadcast_to(v, rank) for v in
           (an.av(a) for a in node.args) if v is not None]
    axes = an.meta_axes(node, ins)
    dirty = any(v.dirty for v in ins)
    out = AV(axes, dirty)
    t = node.target
    pk = getattr(t, "overloadpacket", None)
    # Positions: x + c, x - c keep `pos` (integer results only) and add c to
    # its offset, which the causal comparison below must take into account.
    m = importer._meta(node)
    if (pk in (aten.add, aten.sub) and len(ins) == 1 and ins[0].pos is not None
            and isinstance(node.args[1], int) and not m.dtype.is_floating_point
            and an.av(node.args[0]) is not None and not node.kwargs):
        c = node.args[1] if pk is aten.add else -node.args[1]
        return replace(out, pos=ins[0].pos, pos_src=ins[0].pos_src,
                       pos_off=ins[0].pos_off + c)
    if pk in (aten._to_copy,) or t is prims.convert_element_type.default:
        v = ins[0]
        if not m.dtype.is_floating_point and m.dtype != torch.bool and v.pos is not None:
            return replace(out, pos=v.pos, pos_src=v.pos_src, pos_off=v.pos_off)
        if v.cmask and m.dtype == torch.bool:
            return replace(out, cmask=v.cmask)
        if v.nmask and m.dtype.is_floating_point:
            return replace(out, nmask=v.nmask)
        return replace(out, neginf=v.neginf)
    # k_pos <= q_pos (and the mirrored forms): False for real q, padded k.
    # With k_pos = j + ck and q_pos = i + cq (the inputs' own offsets are
    # checked equal at run time), every padded key j >= L is hidden from every
    # real query i <= L-1 iff L + ck > L - 1 + cq, i.e. ck >= cq (<=), or
    # ck >= cq - 1 for the strict form (<).
    if pk in (aten.le, aten.lt, aten.ge, aten.gt) and len(ins) == 2:
        a, b = ins
        if (a.pos is not None and b.pos is not None and a.pos != b.pos
                and len(node.args) == 2 and all(an.av(x) is not None for x in node.args)):
            k, q = (a, b) if pk in (aten.le, aten.lt) else (b, a)
            strict = pk in (aten.lt, aten.gt)
            kl, ql = _pos_axis(an, k), _pos_axis(an, q)
            # Positions along axes s + ak and s + aq of one root symbol (the
            # real key positions end at n + ak, the real queries at n + aq).
            if (kl is not None and ql is not None and kl[0] == ql[0]
                    and kl[1] + k.pos_off >= ql[1] + q.pos_off - (1 if strict else 0)):
                an.pos_inputs |= a.pos_src | b.pos_src
                if bool(k.pos_src) != bool(q.pos_src):
                    # One side is an in-graph arange (offset 0 at run time):
                    # the inputs must be arange + 0 too (checked per call).
                    an.zero_pos = True
                return replace(out, cmask=(q.pos, k.pos))
        return out
    if pk in (aten.logical_and, aten.bitwise_and) and len(ins) == 2:
        cm = ins[0].cmask or ins[1].cmask
        return replace(out, cmask=cm)
    if pk is aten.where:
        c = an.av(node.args[0])
        c = an.broadcast_to(c, rank) if c is not None else None
        other = node.args[2]
        ov = an.av(other)
        neg = (isinstance(other, float) and other == -math.inf) or (ov is not None and ov.neginf)
        if c is not None and c.cmask and neg:
            return replace(out, nmask=c.cmask)
        return out
    if pk is aten.add and len(ins) == 2:
        nm = ins[0].nmask or ins[1].nmask
        return replace(out, nmask=nm)
    return out


def _constant(an: Analysis, node) -> AV:
    args = importer.bind_args(node)
    v = args.get("s", args.get("fill_value"))
    val = an.env.get(v) if isinstance(v, torch.fx.Node) else v
    if isinstance(val, torch.SymInt) and an.padded_factor(val.node.expr):
        an.fail(node, "a padded size as a fill value")
    return AV(an.meta_axes(node), neginf=isinstance(v, float) and v == -math.inf)


def _arange(an: Analysis, node) -> AV:
    """A static arange does not depend on any padded size. arange(start,
    s + c) with a static start and step 1 (Hugging Face's key positions):
    positions along its axis (`pos`, offset start), continued by the padding
    (the padded graph computes arange(start, P + c))."""
    args = importer.bind_args(node)
    start = args.get("start", 0) or 0
    end, step = args.get("end"), args.get("step", 1)
    end_val = an.env.get(end) if isinstance(end, torch.fx.Node) else end
    if isinstance(end_val, torch.SymInt) and an.padded_factor(end_val.node.expr):
        if not isinstance(start, int) or step not in (1, None):
            an.fail(node, "arange to a padded size with a symbolic start or a step")
        axes = an.meta_axes(node)
        if _single_affine(an, axes[0]) is None:
            an.fail(node, "arange to a padded size that is not s + c")
        return AV(axes, pos=0, pos_off=start)
    for k in ("start", "end", "step"):
        v = args.get(k)
        v = an.env.get(v) if isinstance(v, torch.fx.Node) else v
        if isinstance(v, (torch.SymInt, torch.SymFloat)) and an.padded_factor(v.node.expr):
            an.fail(node, f"arange with a padded {k}")
    return AV(an.meta_axes(node))


# Views ---------------------------------------------------------------------------------

def _identity(an, node) -> AV:
    return an.av(node.args[0])


def _permute(an, node) -> AV:
    v = an.av(node.args[0])
    if node.target is aten.permute.default:
        perm = [d % v.rank for d in node.args[1]]
    elif node.target is aten.t.default:
        perm = list(range(v.rank))[::-1]
    else:
        perm = list(range(v.rank))
        a, b = node.args[1] % v.rank, node.args[2] % v.rank
        perm[a], perm[b] = perm[b], perm[a]
    inv = {src: dst for dst, src in enumerate(perm)}
    return an.remap(v, [v.axes[p] for p in perm], inv)


def _expand(an, node) -> AV:
    v = an.av(node.args[0])
    axes = an.meta_axes(node, [v])
    lead = len(axes) - v.rank
    out = []
    for i, a in enumerate(axes):
        j = i - lead
        out.append(v.axes[j] if j >= 0 and v.axes[j] == a else a)
    return an.remap(v, out, {j: j + lead for j in range(v.rank)})


def _reshape(an, node) -> AV:
    """Regroups the input's factor sequence into the result dimensions; static
    factors may be split or merged freely, a padded factor must stay whole."""
    v = an.av(node.args[0])
    m = importer._meta(node)
    out_dims = [_expr(d) for d in m.shape]
    seq: List[Tuple[sympy.Expr, int]] = []   # (factor, input axis)
    for i, a in enumerate(v.axes):
        for f in a:
            seq.append((f, i))
    out_axes: List[Factors] = []
    amap: Dict[int, int] = {}
    k = 0
    for oi, d in enumerate(out_dims):
        if _is_one(d):
            out_axes.append(())
            continue
        got: List[sympy.Expr] = []
        prod = sympy.Integer(1)
        while not _eq(prod, d):
            if k >= len(seq):
                an.fail(node, f"reshape {[str(x) for x in v.axes]} -> {out_dims} does not "
                              "regroup the dimensions")
            f, src = seq[k]
            rest = sympy.simplify(d / prod)
            if f.is_Integer and rest.is_Integer and int(f) > int(rest):
                if int(f) % int(rest):
                    an.fail(node, "reshape splits a dimension unevenly")
                got.append(rest)
                seq[k] = (sympy.Integer(int(f) // int(rest)), src)
                prod = prod * rest
                continue
            got.append(f)
            prod = sympy.expand(prod * f)
            k += 1
            if an.padded_factor(f):
                amap[src] = oi
        out_axes.append(tuple(got))
    if k != len(seq):
        an.fail(node, "reshape leaves factors over")
    # Facts survive only on an axis that stays alone.
    def keep(a):
        return a is not None and a in amap and len(out_axes[amap[a]]) == 1
    res = AV(tuple(out_axes), v.dirty)
    if keep(v.pos):
        res = replace(res, pos=amap[v.pos], pos_src=v.pos_src, pos_off=v.pos_off)
    for f in ("cmask", "nmask", "zmask"):
        p = getattr(v, f)
        if p is not None and keep(p[0]) and keep(p[1]):
            res = replace(res, **{f: (amap[p[0]], amap[p[1]])})
    return res


def _slice(an, node) -> AV:
    args = importer.bind_args(node)
    v = an.av(args["self"])
    dim = args["dim"] % v.rank
    if an.padded_axis(v.axes[dim]):
        # Exact when the result's real positions read real positions: a static
        # start, step 1, and an end at (or past) the real end.
        start, end, step = (an.env.get(x) if isinstance(x, torch.fx.Node) else x
                            for x in (args["start"], args["end"], args["step"]))
        lin = affine(v.axes[dim][0], an.syms) if len(v.axes[dim]) == 1 else None
        xm = importer._meta(args["self"])
        static_lead = all(isinstance(x, int) for x in xm.shape[:dim])  # no int() on a SymInt:
        # that would guard (specialize) the symbol in Dynamo's shape env
        if (lin is not None and isinstance(start, int) and start < 0 and step in (1, None)
                and (end is None or end == INT_MAX) and -start <= 2 + lin[1] and static_lead):
            # The last k positions (generate()'s logits of the last token,
            # hidden[:, -1:]): padded, they would be padding; `rewrite`
            # gathers them at the real length instead. Real when the real
            # length n + c reaches k (a dynamic n is at least 2).
            an.tail_slices.append((node, lin[0], lin[1]))
            return AV(an.meta_axes(node, [v]), v.dirty)
        ok = lin is not None and isinstance(start or 0, int) and (start or 0) >= 0 \
            and step in (1, None)
        if ok and isinstance(end, int) and end != INT_MAX:
            # A static prefix (Hugging Face's first position, position_ids[:, :1]):
            # real if the real length n + c reaches its end; Dynamo
            # specializes sizes 0 and 1, so a dynamic n is at least 2.
            ok = 0 <= end <= 2 + lin[1]
        elif ok and end is not None and end != INT_MAX:
            e = affine(end.node.expr, an.syms) if isinstance(end, torch.SymInt) else None
            ok = e is not None and e[0] == lin[0] and e[1] <= lin[1]
        if not ok:
            an.fail(node, "slice of a part of the padded dimension")
    else:
        for x in (args["start"], args["end"], args["step"]):
            x = an.env.get(x) if isinstance(x, torch.fx.Node) else x
            if isinstance(x, torch.SymInt) and an.padded_factor(x.node.expr):
                an.fail(node, "slice bounds that depend on a padded size")
    res = replace(v, axes=an.meta_axes(node, [v]))
    if v.pos == dim:  # positions along the sliced axis: start moves them
        start, step = args["start"] or 0, args["step"]
        if isinstance(start, int) and start >= 0 and step in (1, None):
            res = replace(res, pos_off=v.pos_off + start)
        else:
            res = replace(res, pos=None, pos_src=frozenset(), pos_off=0)
    return res


def _along_static(an, node, v: AV, dim: int, what: str):
    if an.padded_axis(v.axes[dim % v.rank]):
        an.fail(node, f"{what} along the padded dimension")


def _select(an, node) -> AV:
    v = an.av(node.args[0])
    dim = node.args[1] % v.rank
    idx = an.env.get(node.args[2]) if isinstance(node.args[2], torch.fx.Node) else node.args[2]
    if isinstance(idx, torch.SymInt) and an.padded_factor(idx.node.expr):
        an.fail(node, "select at an index that depends on a padded size")
    _along_static(an, node, v, dim, "select")
    amap = {i: (i if i < dim else i - 1) for i in range(v.rank) if i != dim}
    amap[dim] = None
    return an.remap(v, v.axes[:dim] + v.axes[dim + 1:], amap)


def _split(an, node):
    v = an.av(node.args[0])
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    _along_static(an, node, v, dim, "split")
    ms = importer._meta(node)
    d = dim % v.rank
    return [AV(v.axes[:d] + (an.leaf_factors(node, _expr(m.shape[d])),) + v.axes[d + 1:],
               v.dirty) for m in ms]


def _cat(an, node) -> AV:
    ins = [an.av(a) for a in node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    axes = an.meta_axes(node, [v for v in ins if v is not None])
    d = dim % len(axes)
    if an.padded_axis(axes[d]):
        # Exact when only the last piece is padded along it (the padding stays at the end).
        pieces = [an.padded_axis(v.axes[d]) if v is not None and v.rank == len(axes) else False
                  for v in ins]
        if any(pieces[:-1]) or not pieces[-1]:
            if not _is_append(an, ins, pieces, d, len(axes)):
                an.fail(node, "concatenation along the padded dimension")
            an.appends.append(node)
    return AV(axes, any(v.dirty for v in ins if v is not None))


def _single_affine(an: Analysis, factors: Factors) -> Optional[Tuple[sympy.Symbol, int]]:
    """(s, c) when an axis is the one factor s + c of a bucketed symbol s."""
    return affine(factors[0], an.syms) if len(factors) == 1 else None


def _is_append(an: Analysis, ins, pieces, d: int, rank: int) -> bool:
    """cat([first, rest...], d) with `first` padded along d as one factor
    s + c and every other piece a tensor static along d: real positions are
    first's real ones, then the rest, written at run time at first's real
    length by `rewrite` (the padding then stays at the end)."""
    return (len(ins) >= 2 and pieces[0] and not any(pieces[1:])
            and all(v is not None and v.rank == rank for v in ins)
            and all(len(v.axes[d]) <= 1 and all(getattr(f, "is_Integer", False) for f in v.axes[d])
                    for v in ins[1:])
            and _single_affine(an, ins[0].axes[d]) is not None)


# Gathers --------------------------------------------------------------------------------

def _grows(an: Analysis, node: torch.fx.Node) -> bool:
    """Whether `node`'s values may be computed from an arange to a padded
    size or a cumsum (anywhere upstream in the subgraph): at padded positions
    such values exceed every real one, where values computed from inputs
    (padded by repeating their last real row) repeat real ones."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen or not isinstance(n, torch.fx.Node):
            continue
        seen.add(n)
        pk = getattr(n.target, "overloadpacket", None)
        if pk is aten.cumsum:
            return True
        if pk is aten.arange and any(
                isinstance(v, torch.SymInt) and an.padded_factor(v.node.expr)
                for v in (an.env.get(a) if isinstance(a, torch.fx.Node) else a
                          for a in n.args)):
            return True
        todo.extend(n.all_input_nodes)
    return False


def _gather(an, node) -> AV:
    if node.target is aten.embedding.default:
        table, idx = an.av(node.args[0]), an.av(node.args[1])
        idx_node = node.args[1]
    else:
        table, idx = an.av(node.args[0]), an.av(node.args[2])
        idx_node = node.args[2]
    if an.padded_axes(table):
        an.fail(node, "gather from a padded table")
    if idx.pos is not None and not idx.pos_src and an.padded_axis(idx.axes[idx.pos]):
        _limit_positions(an, node, idx, table.axes[0])
    elif an.padded_axes(idx) and _grows(an, idx_node):
        an.fail(node, "gather at indices computed from positions or sums that the padding "
                      "continues past the table")
    if idx.pos is not None:
        an.index_inputs |= idx.pos_src
    return AV(idx.axes + table.axes[1:], table.dirty or idx.dirty)


def _limit_positions(an, node, idx: AV, table_axis: Factors) -> None:
    """In-graph positions (an arange to a padded size) index a static table
    of R rows: the padding continues them to P + a + off - 1, so the root
    symbol's padded size is capped at R - a - off (Plan.size_limits; the
    real positions are in range, else PyTorch would fail)."""
    pa = _pos_axis(an, idx)
    rows = _prod(table_axis)
    if pa is None or not getattr(rows, "is_Integer", False) or idx.pos_off < 0:
        an.fail(node, "gather at positions that the padding continues past the table")
    r, a = pa
    cap = int(rows) - a - idx.pos_off
    an.size_limits[r] = min(an.size_limits.get(r, cap), cap)


def _restored_pad(an, node) -> AV:
    """constant_pad_nd whose every use is a slice restoring its input
    (PyTorch's alignment of the memory-efficient kernel's mask, whose pad
    amount is no affine size): its input, which `rewrite` passes on."""
    from . import fold
    if not fold.restoring_slices(node):
        an.fail(node, "pad of a tensor with padded dimensions")
    return an.av(node.args[0])


def _index(an, node) -> AV:
    """x[i0, i1, ...] (aten.index.Tensor). Along a padded axis of x (s' + b)
    only position indices (`pos` along an axis s + a, offset off) are exact:
    real positions read real entries iff a + off <= d + b with s' = s + d
    (a link when s' is another symbol), and the padded ones stay in range
    (x is padded to s's bucket + d)."""
    args = importer.bind_args(node)
    x = an.av(args["self"])
    where = [i for i, t in enumerate(args["indices"]) if t is not None]
    ivs = [an.av(args["indices"][i]) for i in where]
    if x is None or any(v is None for v in ivs):
        an.fail(node, "indexing with operands that are not tensors")
    for i, v in zip(where, ivs):
        if v.pos is not None:
            an.index_inputs |= v.pos_src
        in_graph_pos = v.pos is not None and not v.pos_src and an.padded_axis(v.axes[v.pos])
        if not an.padded_axis(x.axes[i]):
            if in_graph_pos:
                _limit_positions(an, node, v, x.axes[i])
            elif v.pos is None and an.padded_axes(v) and _grows(an, args["indices"][i]):
                an.fail(node, "indexing at indices computed from positions or sums that the "
                              "padding continues past the table")
            continue
        if v.pos_src or v.pos_off < 0:
            # Inputs are not checked as indices; a negative position wraps
            # at the padded length.
            an.fail(node, "indexing along the padded dimension with indices that are not "
                          "in-graph positions from 0")
        xl = _single_affine(an, x.axes[i])
        pl = _single_affine(an, v.axes[v.pos]) if v.pos is not None else None
        if xl is None or pl is None:
            an.fail(node, "indexing along the padded dimension with indices that are not "
                          "positions")
        (sx, b), (sp, a) = xl, pl
        rx, dx = an.root(sx)
        rp, dp = an.root(sp)
        if rx != rp:
            an.link(node, sx, sp, (an.hints.get(sx, 0) - an.hints.get(sp, 0)))
            rx, dx = an.root(sx)
            rp, dp = an.root(sp)
        if rx != rp or a + dp + v.pos_off > b + dx:
            an.fail(node, "position indices that reach past the real entries")
    axes = an.meta_axes(node, ivs + [x])
    return AV(axes, x.dirty or any(v.dirty for v in ivs))


# Reductions and norms ---------------------------------------------------------------------

def _reduce(an, node) -> AV:
    v = an.av(node.args[0])
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or dims == [] or node.target in (aten.sum.default, aten.mean.default):
        dims = list(range(v.rank))
    if isinstance(dims, int):
        dims = [dims]
    dims = {d % max(v.rank, 1) for d in dims}
    for d in dims:
        _along_static(an, node, v, d, "reduction")
    keep = importer._meta(node).dim() == v.rank
    axes = tuple(() if i in dims else a for i, a in enumerate(v.axes) if keep or i not in dims)
    return AV(axes, v.dirty)


def _cumsum(an, node) -> AV:
    """A prefix sum: position i reads positions <= i only, so padding at the
    end of any axis, the scanned one included, leaves real positions exact."""
    v = an.av(node.args[0])
    return AV(v.axes, v.dirty)


def _softmax(an, node) -> AV:
    v = an.av(node.args[0])
    dim = node.args[1] % v.rank
    axes = v.axes
    if an.padded_axis(v.axes[dim]):
        if node.target is aten._softmax.default and v.nmask and v.nmask[1] == dim:
            return AV(axes, v.dirty, zmask=v.nmask)
        an.fail(node, "softmax over the padded dimension without a causal mask on it")
    return AV(axes, v.dirty)


def _layer_norm(an, node):
    v = an.av(node.args[0])
    n = len(node.args[1])
    for d in range(v.rank - n, v.rank):
        _along_static(an, node, v, d, "normalization")
    dirty = v.dirty or any(an.av(a).dirty for a in node.args[2:4] if an.av(a) is not None)
    return [AV(v.axes, dirty), None, None]


# Matmul and attention -----------------------------------------------------------------------

def _mm(an, node) -> AV:
    if node.target is aten.addmm.default:
        bias, a, b = (an.av(x) for x in node.args[:3])
    else:
        bias = None
        a, b = an.av(node.args[0]), an.av(node.args[1])
    ka, kb = a.rank - 1, b.rank - 2
    if an.padded_axis(a.axes[ka]) or an.padded_axis(b.axes[kb]):
        ok = (a.zmask is not None and a.zmask[1] == ka) or (b.zmask is not None and b.zmask[1] == kb)
        if not ok:
            an.fail(node, "matmul contracts the padded dimension")
    dirty = a.dirty or b.dirty or (bias is not None and bias.dirty)
    rank = importer._meta(node).dim()
    axes = a.axes[:-1] + b.axes[-1:]
    if len(axes) < rank:
        axes = b.axes[:rank - len(axes)] + axes
    return AV(tuple(axes[-rank:]), dirty)


def _attention(an, node):
    args = importer.bind_args(node)
    q, k, v = an.av(args["query"]), an.av(args["key"]), an.av(args["value"])
    mask = an.av(args.get("attn_mask", args.get("attn_bias")))
    for x in (q, k, v):
        if an.padded_axis(x.axes[3]):
            an.fail(node, "attention head dimension padded")
    dirty = q.dirty or k.dirty or v.dirty or (mask is not None and mask.dirty)
    if an.padded_axis(k.axes[2]) or an.padded_axis(v.axes[2]):
        causal = bool(args.get("is_causal")) and q.axes[2] == k.axes[2] == v.axes[2]
        masked = False
        if mask is not None:
            mb = an.broadcast_to(mask, 4)
            masked = mb.nmask == (2, 3)
        if not (causal or masked) or k.axes[2] != v.axes[2]:
            _key_mask(an, node, args, k, v, mask)
    out = AV(q.axes, dirty)
    return [out] + [None] * 8


def _key_mask(an: Analysis, node, args, k: AV, v: AV, mask: Optional[AV]) -> None:
    """Records that `rewrite` masks the padded keys of `node` (keys and values
    of one real length s + c), or fails. Only an attention without a mask
    and without is_causal (whose top-left alignment is not the cache's)
    whose outputs other than the first are unused."""
    kl, vl = _single_affine(an, k.axes[2]), _single_affine(an, v.axes[2])
    raw_mask = args.get("attn_mask", args.get("attn_bias"))
    why = None
    if raw_mask is not None and (mask is None or mask.dirty):
        why = "a mask that does not hide them"
    elif args.get("is_causal"):
        why = "is_causal with other query and key lengths"
    elif kl is None or vl is None:
        why = "keys and values not both padded as s + c"
    elif node.target is not aten.scaled_dot_product_attention.default and any(
            u.target is not operator.getitem or (u.args[1] != 0 and u.users)
            for u in node.users):
        why = "outputs other than the result used"
    if why is not None:
        an.fail(node, f"attention over padded keys: {why}")
    # The mask (if any, clean) is combined with the key mask by `rewrite`:
    # its padded key columns, finite or -inf, become -inf.
    an.key_masks.append((node, kl[0], kl[1]))
    if kl[0] != vl[0] or kl[1] != vl[1]:
        an.link(node, vl[0], kl[0], kl[1] - vl[1])


_TRANSFER = {}
for _t in (aten.add, aten.sub, aten.mul, aten.div, aten.pow, aten.maximum, aten.minimum,
           aten.rsub, aten.reciprocal, aten.clamp_min, aten.clamp_max, aten.clamp,
           aten.neg, aten.abs, aten.exp, aten.log, aten.tanh, aten.sin, aten.cos,
           aten.sqrt, aten.rsqrt,
           aten.sigmoid, aten.silu, aten.relu, aten.gelu, aten.eq, aten.ne, aten.lt,
           aten.le, aten.gt, aten.ge, aten.logical_not, aten.bitwise_not, aten.logical_and,
           aten.logical_or, aten.bitwise_and, aten.bitwise_or, aten.where, aten._to_copy):
    _TRANSFER[_t] = _elementwise
_TRANSFER[prims.convert_element_type.default] = _elementwise
for _t in (aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy, aten.contiguous):
    _TRANSFER[_t] = _identity
for _t in (aten.view, aten.reshape, aten._unsafe_view, aten.unsqueeze, aten.squeeze,
           aten.flatten):
    _TRANSFER[_t] = _reshape
_TRANSFER[aten.view.dtype] = lambda an, node: an.fail(node, "view as another dtype")
for _t in (aten.permute, aten.transpose, aten.t):
    _TRANSFER[_t] = _permute
_TRANSFER[aten.expand] = _expand
_TRANSFER[aten.slice] = _slice
_TRANSFER[aten.select] = _select
_TRANSFER[aten.split] = _split
_TRANSFER[aten.split_with_sizes] = _split
_TRANSFER[aten.cat] = _cat
_TRANSFER[aten.embedding] = _gather
_TRANSFER[aten.constant_pad_nd] = lambda an, node: _restored_pad(an, node)
_TRANSFER[aten.index_select] = _gather
_TRANSFER[aten.index] = _index
for _t in (aten.full, aten.scalar_tensor, aten.full_like, aten.zeros, aten.ones):
    _TRANSFER[_t] = _constant
_TRANSFER[aten.arange] = _arange
for _t in (aten.sum, aten.mean, aten.amax, aten.amin, aten.any):
    _TRANSFER[_t] = _reduce
_TRANSFER[aten.cumsum] = _cumsum
_TRANSFER[aten._softmax] = _softmax
_TRANSFER[aten._log_softmax] = _softmax
_TRANSFER[aten.native_layer_norm] = _layer_norm
for _t in (aten.mm, aten.bmm, aten.matmul, aten.addmm):
    _TRANSFER[_t] = _mm
for _t in (aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_flash_attention_for_cpu,
           aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention):
    _TRANSFER[_t] = _attention
_TRANSFER[aten.scaled_dot_product_attention] = lambda an, node: _attention(an, node)[0]


# --- the plan ------------------------------------------------------------------------------

@dataclass
class Plan:
    """How to run one subgraph padded. `syms`: the bucketed symbols (names);
    `pos_inputs`: placeholder indices of integer inputs that must be
    `arange(L) + c` along their padded axis (one c for all) and are padded by
    continuing it; every other padded input repeats its last real row."""

    syms: Tuple[str, ...]
    pos_inputs: Tuple[int, ...] = ()
    refused: Dict[str, str] = field(default_factory=dict)
    mask_inputs: Tuple[int, ...] = ()
    # Rewrites (see the module doc): names of the cat nodes that are appends,
    # (attention node name, symbol, c) of the attentions whose keys past
    # s + c are masked, and pairs of symbols that must be equal at run time.
    appends: Tuple[str, ...] = ()
    key_masks: Tuple[Tuple[str, str, int], ...] = ()
    links: Tuple[Tuple[str, str, int], ...] = ()      # (s', s, d): s' = s + d
    value_uses: Tuple[Tuple[str, int, str, int], ...] = ()  # (node, argument, s, c)
    tail_slices: Tuple[Tuple[str, str, int], ...] = ()      # (slice node, s, c)
    zero_pos: bool = False   # the position inputs must be arange + 0 (an arange compares them)
    size_limits: Tuple[Tuple[str, int], ...] = ()  # (root symbol, largest padded size)

    def __bool__(self):
        return bool(self.syms)

    @property
    def rewrites(self) -> bool:
        return bool(self.appends or self.key_masks or self.value_uses or self.tail_slices)


def dynamic_symbols(gm: torch.fx.GraphModule) -> List[sympy.Symbol]:
    """The free symbols of the placeholders' shapes, in first-seen order."""
    out: List[sympy.Symbol] = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        m = importer._meta(n)
        dims = m.shape if isinstance(m, torch.Tensor) else ()
        for d in dims:
            if isinstance(d, torch.SymInt):
                for s in sorted(d.node.expr.free_symbols, key=str):
                    if s not in out:
                        out.append(s)
    return out


def _analyze(gm, syms) -> Analysis:
    an = Analysis(gm, set(syms))
    an.run()
    bad = an.pos_inputs & an.index_inputs
    if bad:
        raise Unsafe(f"input {sorted(bad)} is both a position (for a causal mask) and a "
                     "gather index")
    return an


def _plan(an: Analysis, syms, refused) -> Plan:
    return Plan(tuple(str(s) for s in syms), tuple(sorted(an.pos_inputs)), refused,
                tuple(sorted(an.mask_inputs)), tuple(n.name for n in an.appends),
                tuple((n.name, str(s), c) for n, s, c in an.key_masks),
                tuple((str(a),) + tuple(_str_root(an, a)) for a in an.links),
                tuple((n.name, i, str(s), c) for n, i, s, c in an.value_uses),
                tuple((n.name, str(s), c) for n, s, c in an.tail_slices), an.zero_pos,
                tuple((str(r), v) for r, v in _root_limits(an).items()))


def _root_limits(an: Analysis) -> Dict[sympy.Symbol, int]:
    """size_limits moved to the roots of the final links (a cap recorded on
    a symbol that a later link made s = r + d caps r at cap - d)."""
    out: Dict[sympy.Symbol, int] = {}
    for sym, cap in an.size_limits.items():
        r, d = an.root(sym)
        out[r] = min(out.get(r, cap - d), cap - d)
    return out


def _str_root(an: Analysis, s) -> Tuple[str, int]:
    r, d = an.root(s)
    return str(r), d


def _hints(gm: torch.fx.GraphModule) -> Dict[sympy.Symbol, int]:
    """The traced size of every plain symbol of the placeholders' shapes."""
    out: Dict[sympy.Symbol, int] = {}
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        m = importer._meta(n)
        dims = m.shape if isinstance(m, torch.Tensor) else (m,) if isinstance(m, torch.SymInt) else ()
        for d in dims:
            if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False):
                try:
                    out[d.node.expr] = int(d.node.hint)
                except (TypeError, ValueError, AttributeError):
                    pass
    return out


def analyze(gm: torch.fx.GraphModule) -> Plan:
    """Which dynamic symbols of `gm` can be padded exactly (see module doc).

    All symbols together first: some are exact only together (the key and
    value caches of one attention, each with its own symbol); then each
    alone, and those that pass alone together, dropping the last until
    they pass."""
    syms = dynamic_symbols(gm)
    if len(syms) > 1:
        try:
            return _plan(_analyze(gm, syms), syms, {})
        except Unsafe:
            pass
    refused: Dict[str, str] = {}
    ok: List[sympy.Symbol] = []
    for s in syms:
        try:
            _analyze(gm, [s])
            ok.append(s)
        except Unsafe as e:
            refused[str(s)] = str(e)
    while ok:
        try:
            return _plan(_analyze(gm, ok), ok, refused)
        except Unsafe as e:
            dropped = ok.pop()
            refused[str(dropped)] = f"not together with the others: {e}"
    return Plan((), (), refused)


# --- rewrites --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Extra:
    """An input `rewrite` adds after the graph's own, built per call by the
    backend from the real size n of `sym` and its padded size P:
      length    int64 0-dim tensor n (on the CPU; the backend moves 0-dim
                inputs to the GPU);
      key_mask  [1, 1, 1, P + c] tensor of float `dtype`, 0 for the keys
                [0, n + c) and the dtype's lowest finite value for the
                padded ones: their weight is exactly 0 in every real row
                (whose own keys score far above it), and a padded query
                row whose own mask hides every real key stays finite (a
                -inf there would make it NaN, and 0 * NaN reaches real
                rows through a later P @ V)."""

    kind: str
    sym: str
    c: int = 0
    dtype: torch.dtype = torch.int64


def rewrite(gm: torch.fx.GraphModule, plan: Plan) -> Tuple[torch.fx.GraphModule, List[Extra]]:
    """A copy of `gm` with the plan's appends and key masks made exact at any
    real size (see the module doc), and the inputs it adds, in order."""
    g = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    out = g.graph_copy(gm.graph, env)
    old_out = next(n for n in gm.graph.nodes if n.op == "output")
    g.output(out).meta = dict(old_out.meta)
    vals = [n.meta.get("val") for n in g.nodes if n.op == "placeholder"]
    fake_mode = torch._guards.detect_fake_mode(vals)
    extras: List[Extra] = []
    extra_nodes: Dict[Extra, torch.fx.Node] = {}
    # The partitioner's subgraphs may interleave placeholders with compute
    # nodes: move them to the front (their order, the signature, kept) so
    # the added ones, last, are defined before any use.
    phs = [n for n in g.nodes if n.op == "placeholder"]
    first = next(n for n in g.nodes if n.op != "placeholder")
    for ph in phs:
        first.prepend(ph)
    last_ph = phs[-1]
    from . import fold
    fold.unpad_attention_masks_in(g)  # imported only: PyTorch's kernel needs the alignment
    by_name = {n.name: n for n in g.nodes}

    def meta(a):
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a

    def call(target, args, kwargs=None, val=None):
        node = g.call_function(target, tuple(args), dict(kwargs or {}))
        if val is None:
            with fake_mode:
                val = target(*torch.fx.node.map_arg(args, meta),
                             **torch.fx.node.map_arg(kwargs or {}, meta))
        node.meta["val"] = val
        return node

    def extra(e: Extra, like: torch.Tensor, shape) -> torch.fx.Node:
        nonlocal last_ph
        if e not in extra_nodes:
            with g.inserting_after(last_ph):
                ph = g.placeholder(f"llmc_{e.kind}_{e.sym}_{e.c}")
            with fake_mode:
                ph.meta["val"] = torch.empty(shape, dtype=e.dtype, device=like.device)
            last_ph = ph
            extras.append(e)
            extra_nodes[e] = ph
        return extra_nodes[e]

    for name in plan.appends:
        node = by_name[name]
        pieces, dim = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        res = meta(node)
        d = dim % res.dim()
        first = meta(pieces[0])
        (sym, c), = [(str(s), int(sympy.expand(_expr(first.shape[d]) - s)))
                     for s in _expr(first.shape[d]).free_symbols if str(s) in plan.syms]
        length = extra(Extra("length", sym), res, ())
        with g.inserting_before(node.next):
            rest = list(pieces[1:])
            new = rest[0] if len(rest) == 1 else call(aten.cat.default, (rest, d))
            k = int(meta(new).shape[d])
            pos = call(aten.arange.start, (c, c + k),
                       {"dtype": torch.int64, "device": res.device})
            idx = call(aten.add.Tensor, (length, pos))
            put = call(aten.index_put.default, (node, [None] * d + [idx], new))
        node.replace_all_uses_with(put, delete_user_cb=lambda u: u is not put)

    for name, i, sym, c in plan.value_uses:
        node = by_name[name]
        with g.inserting_before(node):
            value = extra(Extra("length", sym), meta(node), ())
            if c:
                value = call(aten.add.Tensor, (value, c))
        args = list(node.args)
        args[i] = value
        node.args = tuple(args)

    for name, sym, c in plan.tail_slices:
        # x[..., -k:, ...] along d: rows n + c - k + j of x, gathered along
        # its first axis (what the CUDA gather takes) after merging the
        # dimensions before d with d: flat[i * P + n + c - k + j] for every
        # index i of the dimensions before d (P: x's size along d).
        node = by_name[name]
        x = node.args[0]
        xm, om = meta(x), meta(node)
        d = node.args[1] % om.dim()
        k = int(om.shape[d])
        lead = 1
        for size in xm.shape[:d]:
            lead *= int(size)
        dev = {"dtype": torch.int64, "device": om.device}
        with g.inserting_before(node):
            length = extra(Extra("length", sym), om, ())
            pos = call(aten.add.Tensor, (length, call(aten.arange.start, (c - k, c), dev)))
            if d == 0:
                sel = call(aten.index_select.default, (x, 0, pos))
            else:
                size = call(aten.sym_size.int, (x, d))
                rows = call(aten.mul.Tensor, (call(aten.arange.start, (0, lead), dev), size))
                idx = call(aten.add.Tensor, (call(aten.unsqueeze.default, (rows, 1)),
                                             call(aten.unsqueeze.default, (pos, 0))))
                flat = call(aten.reshape.default, (x, [-1] + list(xm.shape[d + 1:])))
                sel = call(aten.reshape.default,
                           (call(aten.index.Tensor, (flat, [idx])), list(om.shape)))
        node.replace_all_uses_with(sel)
        g.erase_node(node)

    for name, sym, c in plan.key_masks:
        node = by_name[name]
        a = importer.bind_args(node)
        q, k, v = a["query"], a["key"], a["value"]
        qm, km = meta(q), meta(k)
        old = a.get("attn_mask", a.get("attn_bias"))
        dtype = meta(old).dtype if old is not None and meta(old).dtype.is_floating_point \
            else qm.dtype
        mask = extra(Extra("key_mask", sym, c, dtype), qm, (1, 1, 1, km.shape[2]))
        single = node.target is aten.scaled_dot_product_attention.default
        result = meta(node) if single else meta(node)[0]
        with g.inserting_before(node):
            if old is not None:  # its padded key columns get the key mask's minimum
                if meta(old).dtype == torch.bool:
                    old = call(aten.where.ScalarOther,
                               (old, call(aten.full_like.default, (mask, 0.0)), float("-inf")))
                mask = call(aten.add.Tensor, (old, mask))
            sdpa = call(aten.scaled_dot_product_attention.default, (q, k, v),
                        {"attn_mask": mask, "scale": a.get("scale"),
                         "enable_gqa": qm.shape[1] != km.shape[1]}, val=result)
        if single:
            node.replace_all_uses_with(sdpa)
        else:
            for u in list(node.users):  # getitem 0, or unused getitems
                u.replace_all_uses_with(sdpa)
                g.erase_node(u)
        g.erase_node(node)
    g.lint()
    return torch.fx.GraphModule(gm, g), extras


def extra_inputs(extras: Sequence[Extra], real: Dict[str, int], padded: Dict[str, int],
                 device) -> List[torch.Tensor]:
    """The tensors of `extras` for symbols of real sizes `real` run at sizes
    `padded` (equal to `real` for a call that is not padded)."""
    out = []
    made: Dict[Tuple, torch.Tensor] = {}
    for e in extras:
        n, p = real[e.sym], padded[e.sym]
        if e.kind == "length":
            out.append(torch.tensor(n, dtype=torch.int64))
            continue
        key = (n + e.c, p + e.c, e.dtype)
        if key not in made:
            m = torch.zeros((1, 1, 1, p + e.c), dtype=e.dtype, device=device)
            m[..., n + e.c:] = torch.finfo(e.dtype).min
            made[key] = m
        out.append(made[key])
    return out


# --- padding and slicing ---------------------------------------------------------------------

def padded_axes_of(meta, syms: Sequence[str]) -> List[Tuple[int, str, int]]:
    """(axis, symbol, c) for every axis of `meta` of size symbol + c."""
    out = []
    if isinstance(meta, torch.Tensor):
        for i, d in enumerate(meta.shape):
            if not isinstance(d, torch.SymInt):
                continue
            e = d.node.expr
            for x in e.free_symbols:
                if str(x) in syms:
                    c = sympy.expand(e - x)
                    if c.is_Integer:
                        out.append((i, str(x), int(c)))
    return out


def mask_input(meta, syms) -> Optional[sympy.Symbol]:
    """The symbol s when `meta` is a boolean or float [..., s, s] tensor."""
    if not isinstance(meta, torch.Tensor) or meta.dim() < 2:
        return None
    if not (meta.dtype == torch.bool or meta.dtype.is_floating_point):
        return None
    q, k = meta.shape[-2], meta.shape[-1]
    if isinstance(q, torch.SymInt) and isinstance(k, torch.SymInt):
        e = q.node.expr
        if e in syms and _eq(e, k.node.expr):
            return e
    return None


def pad_tensor(t: torch.Tensor, axes: Sequence[Tuple[int, int]], mode: str = "edge") -> torch.Tensor:
    """`t` padded at the end of each (axis, size):
      edge      repeat the last real slice along the axis;
      position  continue `t[..., i, ...] = i + c` (one padded axis);
      mask      [..., q, k] mask: the real block, the rest causal (k <= q True,
                0.0; else False, -inf), so real rows never see padded keys and
                padded rows see at least one key."""
    shape = list(t.shape)
    for a, b in axes:
        shape[a] = b
    if list(t.shape) == shape:
        return t
    # In t's own dimension order (a permuted dense input stays one: the
    # backend hands it to llmc in memory order without a copy).
    order = importer.dense_permutation(t) or tuple(range(t.dim()))
    out = torch.empty([shape[d] for d in order], dtype=t.dtype,
                      device=t.device).permute(importer.inverse_permutation(order))
    if mode == "position":
        (a, b), = axes
        view = [1] * t.dim()
        view[a] = b
        c = t.reshape(-1)[0]
        out.copy_((torch.arange(b, device=t.device, dtype=t.dtype) + c).reshape(view)
                  .expand(shape))
        return out
    if mode == "mask":
        nq, nk = shape[-2], shape[-1]
        causal = (torch.arange(nk, device=t.device)[None, :]
                  <= torch.arange(nq, device=t.device)[:, None])
        if t.dtype == torch.bool:
            out.copy_(causal.expand(shape))
        else:
            fill = torch.zeros((nq, nk), dtype=t.dtype, device=t.device)
            fill.masked_fill_(~causal, float("-inf"))
            out.copy_(fill.expand(shape))
        out[tuple(slice(0, n) for n in t.shape)] = t
        return out
    region = tuple(slice(0, n) for n in t.shape)
    out[region] = t
    for a, b in axes:
        n = t.shape[a]
        if n == b:
            continue
        src = [slice(None)] * t.dim()
        src[a] = slice(n - 1, n)
        dst = [slice(None)] * t.dim()
        dst[a] = slice(n, b)
        out[tuple(dst)] = out[tuple(src)]
    return out


def is_position(t: torch.Tensor, axis: int) -> Optional[int]:
    """c when `t` is arange(n) + c along `axis` (all other sizes 1), else None."""
    return position_offsets([(t, axis)])[0]


def position_offsets(items: Sequence[Tuple[torch.Tensor, int]]) -> List[Optional[int]]:
    """is_position of every (tensor, axis), reading the device once: per
    tensor t - arange(n) is reduced to its (min, max) on the device, all of
    them stacked into one tensor and read back with one `.tolist()` (one
    host-device synchronization for all position inputs of a call instead of
    two per input). t is arange(n) + c exactly when min == max == c."""
    res: List[Optional[int]] = [None] * len(items)
    parts, where = [], []
    for k, (t, axis) in enumerate(items):
        if t.numel() == 0 or t.numel() != t.shape[axis] or t.dtype == torch.bool:
            continue
        flat = t.reshape(-1)
        d = flat - torch.arange(flat.numel(), device=t.device, dtype=t.dtype)
        parts.append(torch.stack(torch.aminmax(d)).to(
            torch.float64 if t.dtype.is_floating_point else torch.int64))
        where.append(k)
    if not parts:
        return res
    if len({p.dtype for p in parts}) > 1:
        parts = [p.to(torch.float64) for p in parts]
    vals = torch.cat(parts).tolist()
    for j, k in enumerate(where):
        lo, hi = vals[2 * j], vals[2 * j + 1]
        if lo == hi:
            res[k] = int(lo)
    return res
