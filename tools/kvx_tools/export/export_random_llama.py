"""Exports a Llama with random weights and any shape, for tests of awkward sizes.

  python3 -m kvx_tools.export.export_random_llama --dim D --hidden H --layers L --heads NH \\
      --kv-heads NKV --head-dim HD --vocab V [--untied] [--max-seq-len N] [--norm-eps E] \\
      [--rope-theta T] [--sliding-window W [--window-layers 0,2]] [--dtype f32|f16] --seed S -o OUT.onnx \\
      [--external-data]

--sliding-window W masks a band on the windowed layers (all of them unless --window-layers lists some): a
query at position p sees keys p-W+1..p, HF's convention; the window goes into the metadata for kvx convert.

--dtype f16 stores the weights fp16, each read through a Cast to fp32 (the graph computes in fp32, as
mixed-precision exports do), and makes them a block at a time as they are written (random_matrix.py): with
--external-data the export holds one block in memory whatever the shape, so that models of the sizes people
run (Llama 3.1 8B's: 16 GB of fp16) can be made on a small machine. Its values come from a generator per
tensor, not the one sequence of the default fp32 weights.
"""

import argparse
import sys

import numpy as np

from .llama_graph import build_llama_graph
from .onnx_save import export_onnx
from .random_matrix import RandomMatrix


def random_llama_weights(config, tied, seed):
    """Weights named and shaped as build_llama_graph expects.

    Each Linear is scaled by 1/sqrt(fan_in) so that every activation stays O(1) whatever the shape;
    the classifier gets a larger gain so that logits spread over a few units (a softmax that is neither
    uniform nor one-hot). Norm weights sit near 1 with noise, so a swapped norm would show.
    """
    rng = np.random.default_rng(seed)
    c = config
    q_dim, kv_dim = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]

    def linear(out_features, in_features, gain=1.0):
        w = rng.standard_normal((out_features, in_features)) * (gain / np.sqrt(in_features))
        return w.astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(c["dim"])).astype(np.float32)

    weights = {"tok_embeddings": rng.standard_normal((c["vocab_size"], c["dim"])).astype(np.float32)}
    for i in range(c["n_layers"]):
        weights[f"layers.{i}.attn_norm"] = norm()
        weights[f"layers.{i}.wq"] = linear(q_dim, c["dim"])
        weights[f"layers.{i}.wk"] = linear(kv_dim, c["dim"])
        weights[f"layers.{i}.wv"] = linear(kv_dim, c["dim"])
        weights[f"layers.{i}.wo"] = linear(c["dim"], q_dim, gain=0.5)
        weights[f"layers.{i}.ffn_norm"] = norm()
        weights[f"layers.{i}.w_gate"] = linear(c["hidden_dim"], c["dim"])
        weights[f"layers.{i}.w_up"] = linear(c["hidden_dim"], c["dim"])
        weights[f"layers.{i}.w_down"] = linear(c["dim"], c["hidden_dim"], gain=0.5)
    weights["final_norm"] = norm()
    if not tied:
        weights["classifier"] = linear(c["vocab_size"], c["dim"], gain=2.0)
    else:
        # The tied classifier is the embedding itself: scaled for O(1) logits. A larger gain would let
        # the token's own row dominate its logits (x still holds its embedding), a near one-hot softmax.
        weights["tok_embeddings"] *= np.float32(1.0 / np.sqrt(c["dim"]))
    return weights


def streamed_random_llama_weights(config, tied, seed, dtype):
    """Weights named and shaped as build_llama_graph expects, scaled as random_llama_weights scales them, in dtype,
    each made a block of rows at a time when written (RandomMatrix, seeded with seed and its place in the list)."""
    c = config
    q_dim, kv_dim = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]
    shapes = {"tok_embeddings": ((c["vocab_size"], c["dim"]), 1.0 / np.sqrt(c["dim"]) if tied else 1.0)}
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        shapes.update({p + "wq": ((q_dim, c["dim"]), 1.0), p + "wk": ((kv_dim, c["dim"]), 1.0),
                       p + "wv": ((kv_dim, c["dim"]), 1.0), p + "wo": ((c["dim"], q_dim), 0.5),
                       p + "w_gate": ((c["hidden_dim"], c["dim"]), 1.0), p + "w_up": ((c["hidden_dim"], c["dim"]), 1.0),
                       p + "w_down": ((c["dim"], c["hidden_dim"]), 0.5)})
    if not tied:
        shapes["classifier"] = ((c["vocab_size"], c["dim"]), 2.0)
    weights = {}
    for k, (name, (shape, gain)) in enumerate(shapes.items()):
        scale = gain if name == "tok_embeddings" else gain / np.sqrt(shape[1])
        weights[name] = RandomMatrix(shape, scale, [seed, k], dtype)
    rng = np.random.default_rng([seed, len(shapes)])
    for name in ["final_norm", *(f"layers.{i}.{n}" for i in range(c["n_layers"]) for n in ("attn_norm", "ffn_norm"))]:
        weights[name] = (1.0 + 0.1 * rng.standard_normal(c["dim"])).astype(dtype)
    return weights


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--hidden", type=int, required=True, help="MLP hidden size")
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True, help="even; need not be dim / heads")
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--untied", action="store_true", help="a classifier of its own")
    parser.add_argument("--max-seq-len", type=int, default=256)
    parser.add_argument("--norm-eps", type=float, default=1e-5)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--sliding-window", type=int, default=0, help="window W of the windowed layers")
    parser.add_argument("--window-layers", help="comma-separated layers with the window (default: all)")
    parser.add_argument("--dtype", choices=["f32", "f16"], default="f32",
                        help="weight storage (f16: read through Casts to fp32, made block by block)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--external-data", action="store_true", help="weights in OUT.onnx.data, written as made")
    args = parser.parse_args(argv)
    if args.head_dim % 2 or args.heads % args.kv_heads:
        parser.error("--head-dim must be even and --heads a multiple of --kv-heads")
    if args.sliding_window < 0 or (args.window_layers and not args.sliding_window):
        parser.error("--sliding-window must be positive, and --window-layers needs it")
    if args.window_layers:
        args.window_layers = sorted({int(i) for i in args.window_layers.split(",")})
        if not all(0 <= i < args.layers for i in args.window_layers):
            parser.error(f"--window-layers must name layers 0..{args.layers - 1}")
    elif args.sliding_window:
        args.window_layers = list(range(args.layers))
    return args


def main(argv=None):
    args = parse_args(argv)
    config = {
        "dim": args.dim, "hidden_dim": args.hidden, "n_layers": args.layers, "n_heads": args.heads,
        "n_kv_heads": args.kv_heads, "head_dim": args.head_dim, "vocab_size": args.vocab,
        "max_seq_len": args.max_seq_len, "norm_eps": args.norm_eps, "rope_theta": args.rope_theta,
    }
    if args.sliding_window:
        config.update(sliding_window=args.sliding_window, window_layers=args.window_layers)
    if args.dtype == "f16":
        weights = streamed_random_llama_weights(config, tied=not args.untied, seed=args.seed, dtype=np.float16)
    else:
        weights = random_llama_weights(config, tied=not args.untied, seed=args.seed)
    export_onnx(lambda data: build_llama_graph(config, weights, data), args.output, args.external_data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
