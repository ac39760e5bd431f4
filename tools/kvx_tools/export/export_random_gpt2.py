"""Exports a GPT-2 with random weights and any shape, for tests of awkward sizes.

  python3 -m kvx_tools.export.export_random_gpt2 --dim D --hidden H --layers L --heads NH --head-dim HD \\
      --vocab V [--untied] [--max-seq-len N] [--norm-eps E] [--no-position-ids] --seed S -o OUT.onnx \\
      [--external-data]
"""

import argparse
import sys

import numpy as np

from .gpt2_graph import build_gpt2_graph
from .onnx_save import save_onnx


def random_gpt2_weights(config, tied, seed):
    """Weights named and shaped as build_gpt2_graph expects.

    Linear weights are scaled by 1/sqrt(fan_in) so that activations stay O(1) whatever the shape. Norm
    weights sit near 1 and every bias near 0 with noise, so that a swapped or dropped one shows. Position
    embeddings are as large as token embeddings, so that a wrong position changes the logits visibly.
    """
    rng = np.random.default_rng(seed)
    c = config
    dim, width = c["dim"], c["n_heads"] * c["head_dim"]

    def linear(out_features, in_features, gain=1.0):
        return (rng.standard_normal((out_features, in_features)) * (gain / np.sqrt(in_features))).astype(np.float32)

    def vector(n, center, spread):
        return (center + spread * rng.standard_normal(n)).astype(np.float32)

    # The tied classifier is the embedding itself, scaled for logits of a few units (see
    # export_random_llama: larger would make the token's own row dominate its logits).
    embedding_scale = 1.0 / np.sqrt(dim) if tied else 1.0
    weights = {
        "tok_embeddings": (rng.standard_normal((c["vocab_size"], dim)) * embedding_scale).astype(np.float32),
        "pos_embeddings": (rng.standard_normal((c["max_seq_len"], dim)) * embedding_scale).astype(np.float32),
    }
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        for name, (out_features, in_features, gain) in {
                "wq": (width, dim, 1.0), "wk": (width, dim, 1.0), "wv": (width, dim, 1.0),
                "wo": (dim, width, 0.5), "w_up": (c["hidden_dim"], dim, 1.0),
                "w_down": (dim, c["hidden_dim"], 0.5)}.items():
            weights[p + name] = linear(out_features, in_features, gain)
            weights[p + name + "_bias"] = vector(out_features, 0.0, 0.1)
        for norm in ("attn_norm", "ffn_norm"):
            weights[p + norm] = vector(dim, 1.0, 0.1)
            weights[p + norm + "_bias"] = vector(dim, 0.0, 0.1)
    weights["final_norm"] = vector(dim, 1.0, 0.1)
    weights["final_norm_bias"] = vector(dim, 0.0, 0.1)
    if not tied:
        weights["classifier"] = linear(c["vocab_size"], dim, gain=2.0)
    return weights


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True, help="MLP hidden size (GPT-2: 4 * dim)")
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True, help="need not be dim / heads")
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--untied", action="store_true", help="a classifier of its own")
    parser.add_argument("--max-seq-len", type=int, default=256, help="rows of the position embedding")
    parser.add_argument("--norm-eps", type=float, default=1e-5)
    parser.add_argument("--no-position-ids", action="store_true",
                        help="positions computed in the graph from the cache length, no position_ids input")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--external-data", action="store_true", help="weights in OUT.onnx.data")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = {
        "dim": args.dim, "hidden_dim": args.hidden, "n_layers": args.layers, "n_heads": args.heads,
        "head_dim": args.head_dim, "vocab_size": args.vocab, "max_seq_len": args.max_seq_len,
        "norm_eps": args.norm_eps,
    }
    weights = random_gpt2_weights(config, tied=not args.untied, seed=args.seed)
    model = build_gpt2_graph(config, weights, position_ids_input=not args.no_position_ids)
    save_onnx(model, args.output, args.external_data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
