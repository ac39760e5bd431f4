"""One greedy generation with llama.cpp (through llama-cpp-python), timed like `kvx generate`; prints one
JSON line.

    python3 -m kvx_tools.bench.run_llamacpp MODEL.gguf --tokens 1,2,3 -n 256 -t 2

The KV cache is fp32, as kvx's default, so both read the same KV bytes per step. Prefill is one eval of
the whole prompt (llama.cpp splits it into batches of n_batch = 512 tokens); decode is n - 1 evals of one
token each, the greedy pick (argmax of the logits) between them, the way kvx counts its decode steps.
The stop token is not checked: the run always generates n tokens, as `kvx generate --ignore-eos`.

Output: {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_steps", "ids"}, ids = prompt + generated.
"""
import time

import llama_cpp
import numpy as np

from .peer_run import peer_arguments, print_result, prompt_of


def greedy(llm):
    """The argmax of the last evaluated token's logits, read in place: Llama.eval keeps no copy of them
    unless every position's logits are kept (logits_all), which would cost a copy per token."""
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    return int(np.argmax(logits))


def generate(model, prompt, n_new, threads):
    llm = llama_cpp.Llama(model_path=model, n_ctx=len(prompt) + n_new, n_batch=512, n_ubatch=512,
                          n_threads=threads, n_threads_batch=threads, type_k=llama_cpp.GGML_TYPE_F32,
                          type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    start = time.perf_counter()
    llm.eval(prompt)
    prefilled = time.perf_counter()
    ids = list(prompt)
    ids.append(greedy(llm))
    for _ in range(n_new - 1):
        llm.eval([ids[-1]])
        ids.append(greedy(llm))
    end = time.perf_counter()
    print_result(prompt, prefilled - start, n_new - 1, end - prefilled, ids)


def main():
    parser = peer_arguments(__doc__, "GGUF file (kvx_tools.bench.write_gguf)")
    args = parser.parse_args()
    generate(args.model, prompt_of(args, parser), args.n, args.threads)


if __name__ == "__main__":
    main()
