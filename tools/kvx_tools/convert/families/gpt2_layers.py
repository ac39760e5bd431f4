"""A GPT-2 graph as the mapper needs it, whichever way it was spelled (standard operators as torch
exports them, or ONNX Runtime's fused operators): weights in ONNX's MatMul layout [in, out], found by
following the graph."""

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ..blocks.layer_norm import LayerNorm


@dataclass
class LinearWeights:
    weight: np.ndarray  # [in, out]
    bias: Optional[np.ndarray]  # [out], or None for a layer without bias


@dataclass
class Gpt2Attention:
    q: LinearWeights  # [dim, n_heads * head_dim]: the query's columns of the fused projection
    k: LinearWeights  # [dim, n_kv_heads * head_dim]
    v: LinearWeights  # [dim, n_kv_heads * head_dim]
    o: LinearWeights  # [n_heads * head_dim, dim]
    n_heads: int
    n_kv_heads: int
    head_dim: int


@dataclass
class Gpt2Layer:
    attn_norm: LayerNorm
    attention: Gpt2Attention
    ffn_norm: LayerNorm
    up: LinearWeights  # c_fc [dim, hidden_dim]
    down: LinearWeights  # c_proj [hidden_dim, dim]


@dataclass
class Gpt2Graph:
    tok_embeddings: np.ndarray  # [vocab, dim]
    pos_embeddings: np.ndarray  # [n_positions, dim]
    layers: List[Gpt2Layer]
    final_norm: LayerNorm
    classifier: np.ndarray  # [vocab, dim]


def split_fused_qkv(weight, bias, widths):
    """The fused projection [dim, q + k + v] (+ bias [q + k + v]) as q, k, v LinearWeights: the columns of
    the query, then the key's, then the value's, the order of HF's c_attn and ONNX Runtime's Attention."""
    bounds = np.cumsum([0, *widths])
    return [LinearWeights(weight[:, a:b], None if bias is None else bias[a:b])
            for a, b in zip(bounds[:-1], bounds[1:])]
