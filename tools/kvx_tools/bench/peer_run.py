"""What the peer runners (run_llamacpp.py, run_ortgenai.py) share: their command line and the JSON line they
print, which e2e_engines.PythonPeer reads."""
import argparse
import json


def peer_arguments(doc, model_help):
    """The parser of `MODEL --tokens IDS -n N -t T`; a runner may add its own options."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help=model_help)
    parser.add_argument("--tokens", required=True, help="prompt ids, comma-separated")
    parser.add_argument("-n", type=int, required=True, help="new tokens, at least 1")
    parser.add_argument("-t", "--threads", type=int, required=True)
    return parser


def prompt_of(args, parser):
    if args.n < 1 or args.threads < 1:
        parser.error("-n and -t must be at least 1")
    return [int(t) for t in args.tokens.split(",")]


def print_result(prompt, prefill_seconds, decode_steps, decode_seconds, ids):
    print(json.dumps({"prefill_tokens_per_s": len(prompt) / prefill_seconds,
                      "decode_tokens_per_s": decode_steps / decode_seconds if decode_steps else 0.0,
                      "decode_steps": decode_steps, "ids": [int(t) for t in ids]}))
