"""Maps a GPT-2 ONNX graph onto kvx's tensors by walking the residual stream:

  Gather(wte, input_ids) + Gather(wpe, positions)
  -> [LayerNorm -> fused-QKV attention -> Add, LayerNorm -> GELU MLP -> Add] x n_layers
  -> LayerNorm -> MatMul(classifier) -> logits

as torch exports HF's GPT2LMHeadModel (standard operators). ONNX Runtime's fused spelling of the same
model is walked by patterns_ortgenai_gpt2; both walks end in assemble_gpt2. Hyperparameters come from
what the walk finds, never from names.
"""

from ..errors import ConvertError, cannot_map
from .gpt2_layers import Gpt2Graph, Gpt2Layer
from ..graph.index import node_attr
from .mapped_model import MappedModel, add_classifier, check_shapes, float_weight, the_one_eps
from ..blocks.embedding import match_classifier, token_embedding_gather
from ..blocks.fused_qkv import match_fused_qkv_attention
from ..blocks.gelu import match_gelu_mlp
from ..blocks.layer_norm import match_layer_norm


def position_embedding_add(ix, token_gather):
    """(the Add of token and position embeddings, the position table [n_positions, dim]) when the token
    embedding is added to a Gather of a constant table by positions, else None. The positions must be
    the position_ids input or a Range computed in the graph: what kvx feeds, absolute positions."""
    hidden = token_gather.output[0]
    for add in ix.consumers(hidden, "Add"):
        gather = ix.producer_op(ix.other_input(add, hidden), "Gather")
        table = ix.constant(gather.input[0]) if gather is not None else None
        if table is None or table.ndim != 2 or node_attr(gather, "axis", 0) != 0:
            continue
        positions = ix.trace_back(gather.input[1])
        if positions != "position_ids" and ix.producer_op(positions, "Range") is None:
            raise cannot_map(gather, "a position embedding indexed by the position_ids input or a Range of "
                                     f"positions, found '{positions}'")
        return add, table
    return None


def map_gpt2(ix):
    """The standard-operator graph; ConvertError naming the first node that does not fit."""
    token_gather = token_embedding_gather(ix)
    found = position_embedding_add(ix, token_gather)
    if found is None:
        raise cannot_map(token_gather, "the token embedding added to a position embedding Gather")
    add, positions = found
    hidden, layers = add.output[0], []
    while True:
        norm = match_layer_norm(ix, hidden, ix.producer(hidden))
        classifier = match_classifier(ix, norm.output)
        if classifier is not None:
            break
        attention, hidden = match_fused_qkv_attention(ix, norm.output, hidden, ix.producer(norm.output))
        ffn_norm = match_layer_norm(ix, hidden, ix.producer(hidden))
        mlp = match_gelu_mlp(ix, ffn_norm.output, hidden, ix.producer(ffn_norm.output))
        hidden = mlp.output
        layers.append(Gpt2Layer(attn_norm=norm, attention=attention, ffn_norm=ffn_norm, up=mlp.up, down=mlp.down))
    return assemble_gpt2(Gpt2Graph(tok_embeddings=ix.constant(token_gather.input[0]), pos_embeddings=positions,
                                   layers=layers, final_norm=norm, classifier=classifier))


def assemble_gpt2(graph):
    """kvx's tensors ([out, in] weights) and hyperparameters from a walked graph, after checking that
    every layer agrees with the first."""
    if not graph.layers:
        raise ConvertError("cannot map graph: no decoder layer between the embedding and the classifier")
    embedding = float_weight(graph.tok_embeddings, "the token embedding")
    tensors = {"tok_embeddings": embedding, "pos_embeddings": float_weight(graph.pos_embeddings, "the position embedding")}
    first = graph.layers[0].attention
    heads = (first.n_heads, first.n_kv_heads, first.head_dim)
    for i, layer in enumerate(graph.layers):
        a = layer.attention
        if (a.n_heads, a.n_kv_heads, a.head_dim) != heads:
            raise ConvertError(f"cannot map graph: layer {i} has heads, KV heads, head_dim "
                               f"{(a.n_heads, a.n_kv_heads, a.head_dim)}, layer 0 {heads}")
        p = f"layers.{i}."
        _add_norm(tensors, p + "attn_norm", layer.attn_norm)
        _add_norm(tensors, p + "ffn_norm", layer.ffn_norm)
        for name, linear in (("wq", a.q), ("wk", a.k), ("wv", a.v), ("wo", a.o), ("w_up", layer.up),
                             ("w_down", layer.down)):
            tensors[p + name] = float_weight(linear.weight.T, f"layer {i} {name}")
            if linear.bias is not None:
                tensors[p + name + "_bias"] = float_weight(linear.bias, f"layer {i} {name} bias")
    _add_norm(tensors, "final_norm", graph.final_norm)
    norms = [graph.final_norm, *(n for layer in graph.layers for n in (layer.attn_norm, layer.ffn_norm))]
    hyper = {
        "dim": embedding.shape[1],
        "hidden_dim": graph.layers[0].up.weight.shape[1],
        "n_layers": len(graph.layers),
        "n_heads": first.n_heads,
        "n_kv_heads": first.n_kv_heads,
        "head_dim": first.head_dim,
        "vocab_size": embedding.shape[0],
        "norm_eps": the_one_eps({n.eps for n in norms}, "LayerNorm"),
        "tied_embeddings": add_classifier(tensors, graph.classifier, embedding),
    }
    check_shapes("gpt2", {**hyper, "max_seq_len": graph.pos_embeddings.shape[0]}, tensors)
    return MappedModel(architecture="gpt2", hyperparameters=hyper, tensors=tensors)


def _add_norm(tensors, name, norm):
    tensors[name] = float_weight(norm.weight, name)
    tensors[name + "_bias"] = float_weight(norm.bias, name + " bias")
