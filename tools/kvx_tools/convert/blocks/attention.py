"""A self-attention block read by what it computes, in every form the exporters write (eager, sdpa traced by
TorchScript or dynamo, ONNX's Attention operator), into kvx's tensors:

  1. the core (blocks/attention_core.py): the scores MatMul, the probabilities MatMul and the output
     projection, or the Attention node;
  2. each operand walked back to its projection (blocks/attention_paths.py) and run forwards on indices: every
     element of the query, key and value operands is known as (batch, position, column of its projection);
  3. the heads read off the operands: for each (batch, head) slice of the scores, the query columns it
     multiplies with which key columns, and which value columns its probabilities weigh. A query head's key
     columns name its KV head; repeat_kv, Expand, Tile, the operator's GQA, any order of heads, any fused
     projection (Phi-3's qkv_proj, GPT-NeoX's per-head [q|k|v], Falcon's multi-query layout) come out the same;
  4. the weights re-laid out in kvx's order: query heads grouped by KV head (query head h reads KV head
     h / (H / Hkv)), each head's dims ordered so that the graph's RoPE pairs become kvx's rotate-half pairs
     (k, k + r/2), which the q.k products do not notice as long as q and k share the order; the output
     projection's rows follow the heads.

Causal and padding masks are ignored (kvx builds its own); a mask is recorded for the sliding-window analysis.
"""

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..errors import ConvertError, cannot_map
from .attention_core import find_attention_core
from .attention_paths import ids_along, rows_as_batch_seq, trace_to_projection
from .linear import biased_linear
from .norms import Norm
from .rotary import RopeBlock


@dataclass
class Attention:
    """One layer's attention in kvx's layout (weights in ONNX's MatMul layout [in, out], columns in kvx order)."""
    wq: np.ndarray  # [dim, n_heads * head_dim]
    wk: np.ndarray  # [dim, n_kv_heads * head_dim]
    wv: np.ndarray  # [dim, n_kv_heads * head_dim]
    wo: np.ndarray  # [n_heads * head_dim, dim]
    n_heads: int
    n_kv_heads: int
    head_dim: int
    inv_freq: Optional[np.ndarray]  # [rotary_dim / 2] fp32, None without RoPE
    output: str  # the output projection's result (after its bias)
    biases: dict = field(default_factory=dict)  # "wq"/"wk"/"wv"/"wo" -> [out] where the projection has one
    q_norm: Optional[Norm] = None  # weights [head_dim] (per head) or [n_heads * head_dim] (whole projection)
    k_norm: Optional[Norm] = None
    qk_norm_scope: Optional[str] = None  # "head" or "projection"
    scale: Optional[float] = None  # the q.k scale where it is not 1/sqrt(head_dim)
    softcap: Optional[float] = None
    mask: Optional[str] = None
    rotary_dim: Optional[int] = None  # where RoPE rotates fewer than head_dim dims
    clip: Optional[float] = None  # q, k, v clamped to [-clip, clip] after their projections
    post_norm: object = None  # set by the walker: a norm of the output before the residual add
    projections: list = field(default_factory=list)  # the q, k, v MatMul nodes (one where they are fused)


def match_self_attention(ix, normed, blame):
    """The Attention whose projections read normed [batch, seq, dim]."""
    core = find_attention_core(ix, normed, blame)
    paths = {role: trace_to_projection(ix, tensor, core.node)
             for role, tensor in (("query", core.query), ("key", core.key), ("value", core.value))}
    for role, path in paths.items():
        if path.matmul.input[0] != normed:
            raise cannot_map(path.matmul, f"the {role} projection reading the normed activations '{normed}'")
    ids = {role: ids_along(ix, path, core.node) for role, path in paths.items()}
    if ids["value"].scale != 1.0:
        raise cannot_map(core.node, "the values multiplied by the probabilities unscaled")
    operands = _operands(ix, core, ids)
    heads, row_head = _heads(core, operands, ids)
    return _assemble(ix, core, paths, ids, heads, row_head, operands)


# -- the operands as the core multiplies them ----------------------------------------------------------

@dataclass
class _Operands:
    query: np.ndarray  # [leads, seq, d]: per (batch, head) slice of the scores, the query's element ids
    key: np.ndarray  # [leads, d, keys]: the key's, -1 for cached positions
    value: np.ndarray  # [leads, keys, d]
    output_lead: callable  # flat index of the core's output -> (lead, row, d)


def _operands(ix, core, ids):
    q, k, v = ids["query"].operand, ids["key"].operand, ids["value"].operand
    if core.kind == "attention_op":
        return _attention_op_operands(ix, core, q, k, v)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise cannot_map(core.node, "query, key and value operands of rank 2 or more")
    leads = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    shape_out = ix.concrete.shape(core.output)

    def spread(a):
        return np.broadcast_to(a, leads + a.shape[-2:]).reshape((-1,) + a.shape[-2:])

    def output_lead(flat):
        *lead, row, d = np.unravel_index(flat, shape_out)
        return int(np.ravel_multi_index(lead, shape_out[:-2])) if lead else 0, int(row), int(d)
    return _Operands(spread(q), spread(k), spread(v), output_lead)


def _attention_op_operands(ix, core, q, k, v):
    """ONNX Attention's Q [b, hq, s, d] or [b, s, hq * d], K / V [b, hkv, t, d] or [b, t, hkv * d]: as the
    MatMul form's operands, KV heads repeated for the query heads as the operator's GQA does (h -> h / (hq/hkv))."""
    def four_d(a, heads, what):
        if a.ndim == 4:
            return a
        if a.ndim != 3 or not heads or a.shape[-1] % heads:
            raise cannot_map(core.node, f"a 4-D {what}, or a 3-D one with its heads attribute")
        b, s, width = a.shape
        return a.reshape(b, s, heads, width // heads).transpose(0, 2, 1, 3)
    q4 = four_d(q, core.q_heads, "Q")
    k4, v4 = four_d(k, core.kv_heads, "K"), four_d(v, core.kv_heads, "V")
    hq, hkv = q4.shape[1], k4.shape[1]
    if hkv == 0 or hq % hkv or v4.shape[1] != hkv:
        raise cannot_map(core.node, f"query heads a multiple of the key/value heads (found {hq}, {hkv}, {v4.shape[1]})")
    repeat = np.arange(hq) // (hq // hkv)
    k4, v4 = k4[:, repeat], v4[:, repeat]
    shape_out = ix.concrete.shape(core.output)
    b = q4.shape[0]

    def output_lead(flat):
        index = np.unravel_index(flat, shape_out)
        if len(shape_out) == 4:
            batch, head, row, d = index
        else:
            batch, row, column = index
            head, d = divmod(int(column), shape_out[-1] // hq)
        return int(batch) * hq + int(head), int(row), int(d)
    return _Operands(q4.reshape(b * hq, *q4.shape[2:]), k4.transpose(0, 1, 3, 2).reshape(b * hq, k4.shape[3], -1),
                     v4.reshape(b * hq, *v4.shape[2:]), output_lead)


# -- the heads ----------------------------------------------------------------------------------------

def _decode(flat, shape):
    """(batch, seq, column) arrays of flat indices into a [batch, seq, N] output; -1 stays -1."""
    _, seq, width = shape
    b = np.where(flat >= 0, flat // (seq * width), -1)
    s = np.where(flat >= 0, (flat // width) % seq, -1)
    j = np.where(flat >= 0, flat % width, -1)
    return b, s, j


def _heads(core, ops, ids):
    """(heads, row_head): heads maps each query head (its columns as the core multiplies them) to its KV head's
    (key columns, value columns); row_head maps (lead, row) of the scores to (batch, position, query head).
    Checked to be attention over the whole sequence: each row multiplies one query head at one position with
    one KV head at every position (the cached ones first), every head and position once per batch row, and
    batch row 1 the same as row 0. A lead is one slice of the core's leading dims; its rows are usually one
    head's positions, but may mix heads (multi-query attention written as [b, s * heads, d] @ [b, d, t])."""
    qshape, kshape, vshape = (ids[r].start_shape for r in ("query", "key", "value"))
    heads, row_head, seen = {}, {}, {}
    for lead in range(ops.query.shape[0]):
        qb, qs, qj = _decode(ops.query[lead], qshape)  # [rows, d]
        kb, ks, kj = _decode(ops.key[lead], kshape)  # [d, keys]
        vb, vs, vj = _decode(ops.value[lead], vshape)  # [keys, d]
        new_keys = (kb >= 0).all(axis=0)
        first_new = int(np.argmax(new_keys))
        if (qb < 0).any() or not np.array_equal(new_keys, (vb >= 0).all(axis=1)) or not new_keys.any() or \
                new_keys[:first_new].any() or not new_keys[first_new:].all():
            raise cannot_map(core.node, "queries of the new tokens against the cached keys and values first, then "
                                        "the new ones")
        key_cols, value_cols = kj[:, new_keys], vj[new_keys, :]
        batch = int(qb[0, 0])
        positions = np.arange(key_cols.shape[1])
        consistent = (qb == batch).all() and (kb[:, new_keys] == batch).all() and (vb[new_keys] == batch).all() and \
            (key_cols == key_cols[:, :1]).all() and (value_cols == value_cols[:1]).all() and \
            (ks[:, new_keys] == positions[None, :]).all() and (vs[new_keys] == positions[:, None]).all() and \
            (qs == qs[:, :1]).all()
        if not consistent:
            raise cannot_map(core.node, "each row of the scores one query head at one position against one key head "
                                        "over every position, in order")
        kv = (tuple(key_cols[:, 0]), tuple(value_cols[0]))
        for row in range(qj.shape[0]):
            head = tuple(qj[row])
            if heads.setdefault(head, kv) != kv:
                raise cannot_map(core.node, "each query head reading one key/value head")
            row_head[(lead, row)] = (batch, int(qs[row, 0]), head)
            seen.setdefault((batch, head), []).append(int(qs[row, 0]))
    for (batch, head), rows in seen.items():
        if sorted(rows) != list(range(qshape[1])):
            raise cannot_map(core.node, "every query head at every position of the run once")
    if {h for b, h in seen if b == 0} != {h for b, h in seen}:
        raise cannot_map(core.node, "the same heads in every batch row")
    return heads, row_head


def _kvx_order(core, heads, paths, ids):
    """(query heads, kv heads, head_dim, rope) in kvx's order: kv heads by their first key column, the query
    heads grouped by the kv head they read, each head's columns ordered rotate-half. Returns lists of column
    tuples and, per query head, its kv head's index."""
    by_query = heads
    kv_heads = sorted({(kc, vc) for kc, vc in by_query.values()}, key=lambda kv: min(kv[0]))
    groups = {kv: sorted((qc for qc, k in by_query.items() if k == kv), key=min) for kv in kv_heads}
    if len({len(g) for g in groups.values()}) != 1:
        raise cannot_map(core.node, "as many query heads on every key/value head")
    head_dim = len(next(iter(by_query)))
    if any(len(qc) != head_dim for qc in by_query) or any(len(kc) != head_dim or len(vc) != head_dim
                                                           for kc, vc in kv_heads):
        raise cannot_map(core.node, "one head_dim for queries, keys and values")
    rope_q, rope_k = _rope_of(paths["query"]), _rope_of(paths["key"])
    if (rope_q is None) != (rope_k is None):
        raise cannot_map(core.node, "RoPE on both the query and the key, or on neither")
    q_order, k_order = [], [None] * len(kv_heads)
    for g, kv in enumerate(kv_heads):
        for qc in groups[kv]:
            order = _rotate_half_order(qc, rope_q, ids["query"], core) if rope_q else list(range(head_dim))
            q_order.append([qc[d] for d in order])
            k_cols = [kv[0][d] for d in order]
            if k_order[g] is None:
                k_order[g] = k_cols
            elif k_order[g] != k_cols:
                raise cannot_map(core.node, "the query heads of one key head rotating their dims alike")
    if rope_k is not None:
        for g, kv in enumerate(kv_heads):
            own = [kv[0][d] for d in _rotate_half_order(kv[0], rope_k, ids["key"], core)]
            pairs = set(zip(own[:rope_k.rotary_dim // 2], own[rope_k.rotary_dim // 2:rope_k.rotary_dim]))
            if set(zip(k_order[g][:rope_k.rotary_dim // 2], k_order[g][rope_k.rotary_dim // 2:rope_k.rotary_dim])) != pairs:
                raise cannot_map(core.node, "the key rotated in the same pairs as the query it is multiplied with")
    v_order = [list(vc) for _, vc in kv_heads]
    query_kv = [g for g, kv in enumerate(kv_heads) for _ in groups[kv]]
    return q_order, k_order, v_order, query_kv, head_dim, rope_q, rope_k


def _rope_of(path):
    ropes = [b for b in path.blocks if isinstance(b, RopeBlock)]
    if len(ropes) > 1:
        raise cannot_map(path.matmul, "one RoPE on the way to the attention")
    return ropes[0] if ropes else None


def _rotate_half_order(columns, rope, path_ids, core):
    """The positions in columns (the head's columns as the core multiplies them) in kvx's order: the first
    element of each of the RoPE's pairs, then the second of each, then the dims it does not rotate."""
    at_input = path_ids.block_inputs[id(rope)]  # [.., last] ids at the RoPE's input
    last = at_input.shape[-1]
    groups = at_input.reshape(-1, rope.head_dim) if last % rope.head_dim == 0 else None
    if groups is None:
        raise cannot_map(core.node, "RoPE over whole heads")
    _, _, cols = _decode(groups, path_ids.start_shape)
    wanted = set(columns)
    row = next((r for r in cols if set(r) == wanted), None)
    if row is None:
        raise cannot_map(core.node, "RoPE rotating each head's own elements")
    index = {c: d for d, c in enumerate(columns)}
    firsts = [index[int(row[a])] for a, _ in rope.pairs]
    seconds = [index[int(row[b])] for _, b in rope.pairs]
    rotated = set(firsts) | set(seconds)
    rest = [d for d in range(len(columns)) if d not in rotated]
    return firsts + seconds + rest


def _assemble(ix, core, paths, ids, heads, row_head, operands):
    q_order, k_order, v_order, query_kv, head_dim, rope_q, rope_k = _kvx_order(core, heads, paths, ids)
    n_heads, n_kv_heads = len(q_order), len(k_order)
    if [g for g in query_kv] != [h // (n_heads // n_kv_heads) for h in range(n_heads)]:
        raise ConvertError("internal: query heads not grouped by key/value head")
    q_cols, k_cols, v_cols = (np.array([c for head in order for c in head]) for order in (q_order, k_order, v_order))
    biases = {}
    weights = {}
    for name, role, cols in (("wq", "query", q_cols), ("wk", "key", k_cols), ("wv", "value", v_cols)):
        linear = paths[role].linear
        weights[name] = _taken(linear.weight, cols, axis=1)
        if linear.bias is not None:
            biases[name] = np.ascontiguousarray(np.asarray(linear.bias)[cols])
    o_proj = biased_linear(ix, core.o_proj)
    wo_rows = _output_rows(ix, core, row_head, operands, q_order, head_dim)
    if o_proj.bias is not None:
        biases["wo"] = o_proj.bias
    q_norm, k_norm, scope = _qk_norms(core, paths, ids, q_cols, k_cols, q_order, k_order, head_dim)
    clips = {paths[r].clip for r in ("query", "key", "value")}
    if len(clips) != 1:
        raise cannot_map(core.node, "the query, key and value clipped alike, or none of them")
    scale = _scale(core, ids, rope_q, rope_k, head_dim)
    inv_freq, rotary_dim = None, None
    if rope_q is not None:
        if not np.array_equal(rope_q.inv_freq, rope_k.inv_freq):
            raise cannot_map(core.node, "the same RoPE frequencies for the query and the key")
        inv_freq = rope_q.inv_freq
        rotary_dim = rope_q.rotary_dim if rope_q.rotary_dim != head_dim else None
    return Attention(wq=weights["wq"], wk=weights["wk"], wv=weights["wv"],
                     wo=_taken(o_proj.weight, wo_rows, axis=0), n_heads=n_heads, n_kv_heads=n_kv_heads,
                     head_dim=head_dim, inv_freq=inv_freq, output=o_proj.output, biases=biases, q_norm=q_norm,
                     k_norm=k_norm, qk_norm_scope=scope, scale=scale, softcap=core.softcap, mask=core.mask,
                     rotary_dim=rotary_dim, clip=clips.pop(),
                     projections=list({id(p.matmul): p.matmul for p in paths.values()}.values()))


def _taken(weight, indices, axis):
    """weight's rows (axis 0) or columns (axis 1) at indices: a slice where they are consecutive (most graphs),
    else a take; either stays a view of a weight not read yet (graph/lazy_tensor.py)."""
    indices = np.asarray(indices)
    if indices.size and np.array_equal(indices, np.arange(indices[0], indices[0] + indices.size)):
        whole = slice(int(indices[0]), int(indices[0]) + indices.size)
        return weight[:, whole] if axis == 1 else weight[whole]
    return weight.take(indices, axis=axis)


def _output_rows(ix, core, row_head, operands, q_order, head_dim):
    """The output projection's input rows in kvx's order: row h * head_dim + d of kvx is the merged element
    that holds query head h's output at dim d (the value's d-th column in the core's order)."""
    trace = ix.concrete.trace(core.output, core.merged)
    shape = rows_as_batch_seq(ix.concrete, ix.concrete.shape(core.merged))
    if trace is None or shape is None or (trace.ids <= 0).any():
        raise cannot_map(core.o_proj, "the heads merged into [batch, seq, heads * head_dim] before the output projection")
    kvx_head = {tuple(order_set): h for h, order_set in enumerate(tuple(sorted(order)) for order in q_order)}
    rows = [-1] * (len(q_order) * head_dim)
    merged = trace.source_index().reshape(shape)  # [batch, seq, heads * head_dim]: flat indices into the core's output
    for column, flat in enumerate(merged[0, 0]):
        lead, row, d = operands.output_lead(int(flat))
        batch, position, head = row_head.get((lead, row), (None, None, None))
        if batch != 0 or position != 0:
            raise cannot_map(core.o_proj, "the output projection reading each head's output of the same position")
        rows[kvx_head[tuple(sorted(head))] * head_dim + d] = column
    if -1 in rows:
        raise cannot_map(core.o_proj, "every head's output merged into the output projection")
    return np.array(rows)


def _qk_norms(core, paths, ids, q_cols, k_cols, q_order, k_order, head_dim):
    """(q_norm, k_norm, scope) with weights in kvx's order, or (None, None, None)."""
    q_path, k_path = paths["query"], paths["key"]
    if q_path.whole_norm is not None or k_path.whole_norm is not None:
        if q_path.whole_norm is None or k_path.whole_norm is None:
            raise cannot_map(core.node, "a norm of the whole query and key projections, or of neither")
        return (_reordered(q_path.whole_norm, q_cols), _reordered(k_path.whole_norm, k_cols), "projection")
    q_head = [b for b in q_path.blocks if isinstance(b, Norm)]
    k_head = [b for b in k_path.blocks if isinstance(b, Norm)]
    if any(isinstance(b, Norm) for b in paths["value"].blocks) or len(q_head) > 1 or len(k_head) > 1 or \
            bool(q_head) != bool(k_head):
        raise cannot_map(core.node, "a per-head norm on both the query and the key, or on neither")
    if not q_head:
        return None, None, None
    return (_per_head(q_head[0], ids["query"], q_order[0], head_dim, core),
            _per_head(k_head[0], ids["key"], k_order[0], head_dim, core), "head")


def _reordered(norm, columns):
    if norm.kind != "rms" or norm.weight is None or norm.weight.shape[0] < max(columns) + 1:
        raise ConvertError("cannot map graph: the whole-projection q/k norm must be an RMSNorm with a weight")
    return Norm(norm.kind, np.ascontiguousarray(norm.weight[columns]), None, norm.eps, norm.input, norm.output)


def _per_head(norm, path_ids, head_columns, head_dim, core):
    """The norm's weight [head_dim] in kvx's order of one head (every head shares it)."""
    if norm.kind != "rms" or norm.bias is not None:
        raise cannot_map(core.node, "an RMSNorm of each query and key head")
    at_input = path_ids.block_inputs[id(norm)]
    if at_input.shape[-1] != head_dim:
        raise cannot_map(core.node, f"a per-head norm over head_dim {head_dim} elements, found {at_input.shape[-1]}")
    _, _, cols = _decode(at_input.reshape(-1, head_dim), path_ids.start_shape)
    row = next(r for r in cols if set(r) == set(head_columns))
    position = {int(c): p for p, c in enumerate(row)}
    weight = norm.weight if norm.weight is not None else np.ones(head_dim, np.float32)
    return Norm("rms", np.ascontiguousarray(weight[[position[c] for c in head_columns]]), None, norm.eps,
                norm.input, norm.output)


def _scale(core, ids, rope_q, rope_k, head_dim):
    """The q.k scale kvx must apply, None where it is 1/sqrt(head_dim): the constants on the scores' way,
    the operator's own scale, and RoPE's amplitude on both q and k."""
    scale = core.scale if core.scale_given else 1.0 / math.sqrt(head_dim)
    scale *= ids["query"].scale * ids["key"].scale
    if rope_q is not None:
        scale *= rope_q.amplitude * rope_k.amplitude
    if np.isclose(scale, 1.0 / math.sqrt(head_dim), rtol=1e-5):
        return None
    return float(scale)
