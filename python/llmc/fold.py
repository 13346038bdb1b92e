"""FX rewrites before partitioning: constant causal attention masks.

Hugging Face models under torch.compile build the attention mask inside the
graph even when the caller passes none: `create_causal_mask` cannot skip it
while tracing (the packed-sequence check `find_packed_sequence_indices`
reads the positions' values), so the graph computes
`causal(q >= k) & same_sequence(cumsum(diff(positions) != 1))` from
`arange` positions with arange/index/cumsum/compare ops, PyTorch's SDPA
turns it into a float bias ([B, H, S, S], -inf where masked; padded to a
multiple of 16 and sliced back for the memory-efficient kernel), and
attention reads it. In llmc that is a materialized [B, H, S, S] tensor
(1 GiB at B=4, H=32, S=2048, bf16) plus a split graph (index.Tensor,
arange, cumsum stay in PyTorch).

When the mask depends on no graph input (only on constants and shapes) and
all its shapes are static, its value is the same on every call: this pass
evaluates it once on the CPU and, when it is exactly the causal pattern
(allowed iff key <= query, for every batch and head, query and key lengths
equal), replaces it with `is_causal=True` and no mask. The attention result
is unchanged: masked keys got weight exp(-inf) = 0 either way. Masks that
read an input (a real padding mask), are symbolic, too large to evaluate,
or not causal are left alone.
"""

from __future__ import annotations

import logging
import operator
from typing import Dict, List, Optional, Set

import torch
import torch.fx

log = logging.getLogger("llmc")

aten = torch.ops.aten

# Attention ops: (name of the mask argument, name of the causal flag).
MASKED_ATTENTION = {
    aten._scaled_dot_product_efficient_attention.default: ("attn_bias", "is_causal"),
    aten._scaled_dot_product_cudnn_attention.default: ("attn_bias", "is_causal"),
    aten._scaled_dot_product_flash_attention_for_cpu.default: ("attn_mask", "is_causal"),
    aten.scaled_dot_product_attention.default: ("attn_mask", "is_causal"),
    # Backward graphs: the mask the forward used, rebuilt from constants when
    # the partitioner recomputes it (min-cut rematerialization).
    aten._scaled_dot_product_efficient_attention_backward.default: ("attn_bias", "is_causal"),
    aten._scaled_dot_product_cudnn_attention_backward.default: ("attn_bias", "is_causal"),
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: ("attn_mask", "is_causal"),
}

# Additive mask values at or below this count as masked (see is_causal_mask).
MASKED_BIAS = -65504.0

# Evaluating the mask subgraph materializes its non-view intermediates on the
# CPU: refuse masks whose ops would produce more elements than this.
MAX_ELEMENTS = 1 << 26

_VIEWS = {aten.expand.default, aten.view.default, aten.unsqueeze.default,
          aten.permute.default, aten.slice.Tensor, aten.alias.default,
          aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dim,
          aten.transpose.int, aten.select.int}


def _static_numel(node: torch.fx.Node) -> Optional[int]:
    m = node.meta.get("val")
    vals = m if isinstance(m, (tuple, list)) else [m]
    n = 0
    for v in vals:
        if isinstance(v, torch.Tensor):
            if any(isinstance(d, torch.SymInt) for d in v.shape):
                return None
            n += v.numel()
        elif isinstance(v, torch.SymInt):
            return None
    return n


def _constant_subgraph(mask: torch.fx.Node) -> Optional[List[torch.fx.Node]]:
    """The nodes `mask` is computed from, in graph order, when none is an
    input or draws random numbers and all are static calls of bounded size;
    else None."""
    seen: Set[torch.fx.Node] = set()
    stack = [mask]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op != "call_function":
            return None  # a placeholder (input, parameter) or get_attr
        if n.target is not operator.getitem and not isinstance(n.target, torch._ops.OpOverload):
            return None  # a higher-order op (checkpointing's run_and_save_rng_state), a Python call
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            return None  # rand, bernoulli, dropout: a new value on every call
        numel = _static_numel(n)
        if numel is None:
            return None
        if n.target not in _VIEWS and numel > MAX_ELEMENTS:
            return None
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(mask.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def _to_cpu(v):
    if isinstance(v, torch.device):
        return torch.device("cpu")
    if isinstance(v, (list, tuple)):
        return type(v)(_to_cpu(x) for x in v)
    return v


def _evaluate(nodes: List[torch.fx.Node]) -> Optional[torch.Tensor]:
    env: Dict[torch.fx.Node, object] = {}
    for n in nodes:
        args = torch.fx.node.map_arg(n.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
        kwargs = {k: _to_cpu(v) for k, v in kwargs.items()}
        if "pin_memory" in kwargs:
            kwargs["pin_memory"] = False
        env[n] = n.target(*_to_cpu(args), **kwargs)
    out = env[nodes[-1]]
    return out if isinstance(out, torch.Tensor) else None


def _squeeze_broadcast(t: torch.Tensor) -> torch.Tensor:
    """`t` with every stride-0 (broadcast) dimension narrowed to one entry."""
    for d in range(t.dim()):
        if t.stride(d) == 0 and t.shape[d] > 1:
            t = t.narrow(d, 0, 1)
    return t


def is_causal_mask(mask: torch.Tensor, sq: int, skv: int) -> bool:
    """True iff `mask` (bool: True = attend; float: additive, 0 = attend,
    -inf or any value <= MASKED_BIAS = masked) is the top-left causal mask of
    a [.., sq, skv] score matrix with sq == skv, whatever it broadcasts over.

    Masks do not always use -inf: Hugging Face writes torch.finfo(dtype).min
    and the graph PyTorch 2.11 traces on CUDA for transformers 5.17 writes
    -65504 (float16's lowest, -65536 once in bf16). A causal row always
    attends its diagonal, so its max score m is one of the row's real
    scores; with every |score| < 16384 a key biased by b <= -65504 gets
    weight exp(s + b - m) <= exp(-32736) = 0 exactly in float32 and float64:
    the same result as is_causal. (Scores that large are not a softmax input
    any model produces; the check=True debug mode compares with eager.)"""
    if sq != skv or mask.dim() < 2 or tuple(mask.shape[-2:]) != (sq, skv):
        return False
    m = _squeeze_broadcast(mask)
    if m.dtype == torch.bool:
        allowed = m
    elif m.dtype.is_floating_point:
        allowed = m == 0
        masked = torch.isneginf(m) | (m <= MASKED_BIAS)
        if not bool(torch.all(allowed | masked)):
            return False  # finite nonzero biases, NaN or +inf
    else:
        return False
    # `allowed` may have kept a broadcast query or key dimension of size 1
    # (a padding row expanded over the queries): compare broadcasting.
    tril = torch.ones(sq, skv, dtype=torch.bool).tril()
    return bool(torch.all(allowed == tril))


def _set_arg(node: torch.fx.Node, name: str, value):
    schema = node.target._schema
    for i, a in enumerate(schema.arguments):
        if a.name != name:
            continue
        if i < len(node.args):
            node.update_arg(i, value)
        else:
            node.update_kwarg(name, value)
        return
    raise KeyError(f"{node.target} has no argument {name}")


def _get_arg(node: torch.fx.Node, name: str):
    schema = node.target._schema
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if i < len(node.args):
                return node.args[i]
            if name in node.kwargs:
                return node.kwargs[name]
            return a.default_value if a.has_default_value() else None
    return None


def fold_causal_masks(gm: torch.fx.GraphModule, notes: Optional[List[str]] = None,
                      proven: Optional[Dict[str, tuple]] = None) -> int:
    """Replaces constant causal attention masks with is_causal=True (see the
    module doc). Returns how many attention ops were rewritten; a constant
    mask that was evaluated but kept (not causal, or its evaluation failed)
    is explained in `notes`, for the partition report.

    `proven` links a training step's forward and backward graphs: each mask
    proved causal is recorded under its node's name with (shape, Sq, Skv);
    a graph input of a recorded name, shape and attention shape (the mask
    the forward saved for the backward, which AOTAutograd's partitioner
    passes under the forward node's name) counts as proved."""
    folded = 0
    cache: Dict[torch.fx.Node, bool] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in MASKED_ATTENTION:
            continue
        mask_name, causal_name = MASKED_ATTENTION[node.target]
        mask = _get_arg(node, mask_name)
        if not isinstance(mask, torch.fx.Node) or _get_arg(node, causal_name):
            continue
        if mask not in cache:
            ok = False
            q, k = _get_arg(node, "query").meta.get("val"), _get_arg(node, "key").meta.get("val")
            mval = mask.meta.get("val")
            if (mask.op == "placeholder" and proven is not None and mask.name in proven
                    and isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
                    and isinstance(mval, torch.Tensor)):
                cache[mask] = proven[mask.name] == (tuple(mval.shape), q.shape[-2], k.shape[-2])
                if cache[mask] and notes is not None:
                    notes.append(f"attention mask {mask.name} (an input): the causal mask the "
                                 "forward proved, folded into is_causal")
                if cache[mask]:
                    _set_arg(node, mask_name, None)
                    _set_arg(node, causal_name, True)
                    folded += 1
                continue
            nodes = _constant_subgraph(mask)
            if nodes is not None and isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor):
                sq, skv = q.shape[-2], k.shape[-2]
                if isinstance(sq, int) and isinstance(skv, int):
                    # The backend runs under AOTAutograd's fake mode: compute
                    # real values with it (and any other mode) switched off.
                    from torch.utils._python_dispatch import _disable_current_modes
                    try:
                        with _disable_current_modes(), torch.no_grad():
                            value = _evaluate(nodes)
                            ok = value is not None and is_causal_mask(value, sq, skv)
                        if not ok and notes is not None and value is not None:
                            vals = torch.unique(_squeeze_broadcast(value).float())
                            notes.append(
                                f"constant attention mask {mask.name} {list(value.shape)} kept: "
                                f"not the causal pattern (values {vals[:4].tolist()}"
                                f"{'...' if vals.numel() > 4 else ''}); attention reads it")
                    except Exception as e:  # an op that does not run on the CPU
                        log.debug("llmc: mask %s not evaluated: %s", mask.name, e)
                        if notes is not None:
                            notes.append(f"constant attention mask {mask.name} kept: "
                                         f"evaluating it failed ({type(e).__name__}: {e})")
            cache[mask] = ok
            if ok and proven is not None and isinstance(mask.meta.get("val"), torch.Tensor):
                proven[mask.name] = (tuple(mask.meta["val"].shape), sq, skv)
        if cache[mask]:
            _set_arg(node, mask_name, None)
            _set_arg(node, causal_name, True)
            folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def _same_size(a, b) -> bool:
    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        ea = a.node.expr if isinstance(a, torch.SymInt) else a
        eb = b.node.expr if isinstance(b, torch.SymInt) else b
        import sympy
        return sympy.simplify(sympy.sympify(ea) - sympy.sympify(eb)) == 0
    return int(a) == int(b)


_MASK_VIEWS = {aten.expand.default, aten.view.default, aten.unsqueeze.default,
               aten.alias.default, aten._unsafe_view.default, aten.reshape.default}


def _feeds_attention_only(node: torch.fx.Node) -> bool:
    """Every use of `node` is an attention op's operand, directly or through
    views that keep the last dimension (expand over heads, unsqueeze)."""
    if not node.users:
        return False
    for u in node.users:
        if u.op != "call_function":
            return False
        if u.target in MASKED_ATTENTION:
            continue
        if u.target not in _MASK_VIEWS or not _feeds_attention_only(u):
            return False
    return True


def restoring_slices(pad: torch.fx.Node) -> bool:
    """Whether `pad` is constant_pad_nd(x, [0, p, ...]) (high pads only) and
    every use of it a slice from 0, step 1, back to x's shape."""
    if not (pad.op == "call_function" and pad.target is aten.constant_pad_nd.default):
        return False
    x, amounts = pad.args[0], pad.args[1]
    xm = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(xm, torch.Tensor) or not pad.users:
        return False
    if any(not isinstance(amounts[i], int) or amounts[i] != 0 for i in range(0, len(amounts), 2)):
        return False
    for node in pad.users:
        if not (node.op == "call_function" and node.target is aten.slice.Tensor
                and node.args[0] is pad):
            return False
        start = node.args[2] if len(node.args) > 2 else 0
        step = node.args[4] if len(node.args) > 4 else 1
        sm = node.meta.get("val")
        if start not in (0, None) or step not in (1, None) or not isinstance(sm, torch.Tensor):
            return False
        if xm.dim() != sm.dim() or not all(_same_size(a, b) for a, b in zip(xm.shape, sm.shape)):
            return False
    return True


def unpad_attention_masks_in(graph: torch.fx.Graph) -> int:
    """Gives attention the mask PyTorch padded and sliced back for its
    memory-efficient kernel (whose bias rows must be 16-byte aligned):
    `slice(constant_pad_nd(m, [0, p]), -1, 0, n)` where the slice restores
    m's shape is m itself, with other strides. With symbolic sizes the pad
    amount is an expression (ceil to 8 or 16 of the key length) that
    bucketing cannot pad: `bucketing.rewrite` applies this to the graph llmc
    imports only. Never to a graph PyTorch runs: its kernel would reject the
    unaligned mask. Only masks feeding attention ops (directly or through
    expand/view) are rewritten. Returns how many."""
    done = 0
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target is aten.slice.Tensor):
            continue
        pad = node.args[0]
        if not (isinstance(pad, torch.fx.Node) and restoring_slices(pad)
                and _feeds_attention_only(node)):
            continue
        node.replace_all_uses_with(pad.args[0])
        done += 1
    if done:
        graph.eliminate_dead_code()
    return done


def unpad_attention_masks(gm: torch.fx.GraphModule) -> int:
    """unpad_attention_masks_in on a GraphModule (recompiled)."""
    done = unpad_attention_masks_in(gm.graph)
    if done:
        gm.recompile()
    return done
