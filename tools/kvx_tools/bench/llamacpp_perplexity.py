"""llama.cpp's perplexity over a text, computed through llama-cpp-python the way kvx perplexity computes it
(engine/generation/perplexity.h, itself llama.cpp's llama-perplexity method), so the two figures compare:

  tokens  the whole text tokenized by llama.cpp, its BOS in front where the vocabulary adds one
  chunks  consecutive runs of CTX tokens (the short tail dropped), each from an empty cache, its first token
          replaced by BOS where the vocabulary adds one; at least two chunks
  scored  the logits at positions CTX/2 .. CTX-2 of each chunk against the tokens that follow them; the NLL of
          each from a log-softmax in double; perplexity = exp(mean NLL)

  python3 -m kvx_tools.bench.llamacpp_perplexity MODEL.gguf -f TEXT [-c CTX] [-t THREADS]

llama.cpp evaluates each chunk in one batch (n_batch = CTX) with an fp32 KV cache, as kvx does; its batched
matrix products may round differently from token-by-token ones (and on quantized files it quantizes the
activations to 8 bits), so the figures agree closely, not exactly.
"""
import argparse
import sys

import numpy as np

DEFAULT_CONTEXT = 512


def log_softmax_nll(logits, targets):
    """logits [n, vocab] (any float type), targets [n]: -log softmax(logits[i])[targets[i]] in double, [n]."""
    rows = np.asarray(logits, dtype=np.float64)
    shifted = rows - rows.max(axis=1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return log_sum - shifted[np.arange(len(targets)), targets]


def chunk_perplexity(chunk_logits, tokens, context, bos):
    """The method above over any engine: chunk_logits(chunk tokens) -> logits [CTX, vocab] from an empty cache.
    Returns (perplexity, scored token count, chunk count). ValueError for fewer than 2 x CTX tokens."""
    if context < 4:
        raise ValueError(f"the context must be at least 4 tokens, not {context}")
    if len(tokens) < 2 * context:
        raise ValueError(f"the text has {len(tokens)} tokens; a context of {context} needs at least {2 * context}")
    first, nll, scored, chunks = context // 2, 0.0, 0, 0
    for start in range(0, len(tokens) - context + 1, context):
        chunk = list(tokens[start:start + context])
        if bos is not None:
            chunk[0] = bos
        logits = chunk_logits(chunk)
        nll += float(log_softmax_nll(logits[first:context - 1], np.array(chunk[first + 1:context])).sum())
        scored += context - 1 - first
        chunks += 1
    return float(np.exp(nll / scored)), scored, chunks


def open_llama(gguf_path, context, threads):
    from llama_cpp import Llama
    # logits_all: every position's logits; type_k/type_v 0: an fp32 KV cache, as kvx's (llama.cpp's default is fp16)
    return Llama(model_path=str(gguf_path), n_ctx=context, n_batch=context, n_ubatch=context, n_threads=threads,
                 logits_all=True, type_k=0, type_v=0, verbose=False)


def llama_tokens(llama, text):
    """llama.cpp's tokens of text, with BOS where the vocabulary adds one (llama-perplexity's tokenization)."""
    return llama.tokenize(text.encode("utf-8"), add_bos=True, special=False)


def llama_bos(llama):
    """The token each chunk starts with, or None where the vocabulary adds no BOS."""
    import llama_cpp
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    return llama.token_bos() if llama_cpp.llama_vocab_get_add_bos(vocab) else None


def llamacpp_perplexity(gguf_path, tokens, context=DEFAULT_CONTEXT, threads=2, llama=None):
    """(perplexity, scored, chunks) of llama.cpp on gguf_path over tokens (the text's, as llama_tokens gives)."""
    llama = llama or open_llama(gguf_path, context, threads)

    def chunk_logits(chunk):
        llama.reset()  # an empty cache for every chunk
        llama.eval(chunk)
        return np.array(llama.scores[:len(chunk)])

    return chunk_perplexity(chunk_logits, tokens, context, llama_bos(llama))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="GGUF model file")
    parser.add_argument("-f", "--file", required=True, help="text file to score")
    parser.add_argument("-c", "--context", type=int, default=DEFAULT_CONTEXT, help="tokens per chunk")
    parser.add_argument("-t", "--threads", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        text = open(args.file, encoding="utf-8").read()
        llama = open_llama(args.gguf, args.context, args.threads)
        tokens = llama_tokens(llama, text)
        ppl, scored, chunks = llamacpp_perplexity(args.gguf, tokens, args.context, llama=llama)
    except (OSError, ValueError) as e:
        print(f"llamacpp_perplexity: {e}", file=sys.stderr)
        return 1
    print(f"perplexity {ppl:.6f} over {scored} scored tokens ({chunks} chunks of {args.context}; "
          f"the text has {len(tokens)} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
