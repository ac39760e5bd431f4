"""One greedy generation with ik_llama.cpp (PyPI's ik-llama-cpp-python), timed like `kvx generate` and
run_llamacpp.py; prints one JSON line.

    .cache/ik-venv/bin/python -m kvx_tools.bench.run_ik_llamacpp MODEL.gguf --tokens 1,2,3 -n 256 -t 2

The package is not llama-cpp-python's API (its IkLlama only samples), so this drives its ctypes layer
(ik_llama_cpp._ctypes_api, the fork's llama.h) as run_llamacpp drives llama-cpp-python: the context's defaults
(flash attention on, an fp16 KV cache, as llama-bench's), batches of 512, the given threads. Not an fp32 cache
as run_llamacpp's: the fork refuses an fp32 V without flash attention ("V cache quantization requires
flash_attn"), and its CPU flash attention dies of a fatal error on an fp32 cache (iqk_flash_attn.cpp:188, Ice
Lake). The package's own IkLlama turns flash attention off on CPUs it does not see AVX-VNNI on, which on this
Ice Lake also changed the greedy ids (with the defaults they were kvx's but for a few tokens of Q8_0). Prefill is the prompt's llama_decode
calls, decode is n - 1 single-token calls, the argmax of the last logits between them. The package is run from
a virtual environment of its own (scripts/setup_ik_llamacpp.sh); the stop token is not checked.

Output: {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_steps", "ids"}, ids = prompt + generated.
"""
import time

import numpy as np

from .peer_run import peer_arguments, print_result, prompt_of

BATCH = 512


class PeerFailure(Exception):
    pass


def context_of(api, model, n_ctx, threads):
    params = api.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = BATCH
    params.n_threads = params.n_threads_batch = threads
    ctx = api.llama_init_from_model(model, params)
    if not ctx:
        raise PeerFailure("llama_init_from_model failed")
    return ctx


def decode(api, ctx, tokens, start):
    """llama_decode of tokens at positions start.., the last one's logits kept."""
    batch = api.llama_batch_init(len(tokens), 0, 1)
    try:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i == len(tokens) - 1 else 0
        if api.llama_decode(ctx, batch) != 0:
            raise PeerFailure(f"llama_decode failed at position {start}")
    finally:
        api.llama_batch_free(batch)


def greedy(api, ctx, n_vocab):
    return int(np.argmax(np.ctypeslib.as_array(api.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))))


def generate(model_path, prompt, n_new, threads):
    from ik_llama_cpp import _ctypes_api as api
    from ik_llama_cpp._internals import IkModel

    try:
        model = IkModel(model_path)
    except RuntimeError as e:
        raise PeerFailure(str(e)) from e
    ctx = context_of(api, model.model, len(prompt) + n_new, threads)
    n_vocab = model.n_vocab
    start = time.perf_counter()
    for first in range(0, len(prompt), BATCH):
        decode(api, ctx, prompt[first:first + BATCH], first)
    prefilled = time.perf_counter()
    ids = list(prompt)
    ids.append(greedy(api, ctx, n_vocab))
    for _ in range(n_new - 1):
        decode(api, ctx, [ids[-1]], len(ids) - 1)
        ids.append(greedy(api, ctx, n_vocab))
    end = time.perf_counter()
    api.llama_free(ctx)
    print_result(prompt, prefilled - start, n_new - 1, end - prefilled, ids)


def main():
    parser = peer_arguments(__doc__, "GGUF file")
    args = parser.parse_args()
    prompt = prompt_of(args, parser)
    try:
        import ik_llama_cpp  # noqa: F401  (here, so that a missing package is one line)
    except ImportError as e:
        parser.error(f"{e}: run this with the python of ik-llama-cpp-python's venv (scripts/setup_ik_llamacpp.sh)")
    try:
        generate(args.model, prompt, args.n, args.threads)
    except PeerFailure as e:
        parser.exit(1, f"run_ik_llamacpp: {e}\n")


if __name__ == "__main__":
    main()
