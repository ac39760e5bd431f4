"""One greedy generation with ONNX Runtime GenAI on CPU, timed like `kvx generate`; prints one JSON line.

    python3 -m kvx_tools.bench.run_ortgenai MODEL.onnx --tokens 1,2,3 -n 256 -t 2

The model is an ONNX graph with HF/optimum past/present KV inputs (the fixture SmolLM2 model.onnx, fp32,
written by kvx_tools.export): GenAI's model builder needs torch and transformers, which this project does not
install, so this script writes the genai_config.json the builder would write for such a graph into a
scratch directory (the ONNX files linked beside it) and lets GenAI's own decoder loop run it. The graph
concatenates past and new keys (present = [past, new]), so past and present cannot share one buffer.

Output: {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_steps", "ids"} where ids is the prompt
followed by the generated tokens. Prefill is append_tokens(prompt) (one forward pass over the prompt);
decode is the n - 1 further forward passes, each with its greedy pick, as kvx counts its decode steps.
"""
import json
import os
import tempfile
import time

import onnx
import onnxruntime_genai as og

from .peer_run import peer_arguments, print_result, prompt_of


def genai_config(model, threads, context):
    """GenAI's decoder description of an HF-interface Llama graph; sizes from the graph's own inputs."""
    graph = onnx.load(model, load_external_data=False)
    inputs = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.graph.input}
    logits_dims = [d.dim_value for d in graph.graph.output[0].type.tensor_type.shape.dim]
    _, n_kv_heads, _, head_dim = inputs["past_key_values.0.key"]
    metadata = {p.key: json.loads(p.value) for p in graph.metadata_props}
    n_layers = sum(name.startswith("past_key_values.") and name.endswith(".key") for name in inputs)
    names = {"input_ids": "input_ids", "attention_mask": "attention_mask",
             "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
    if "position_ids" in inputs:
        names["position_ids"] = "position_ids"
    return {
        "model": {
            "type": "llama", "context_length": context, "vocab_size": logits_dims[-1],
            "bos_token_id": metadata["bos_token_id"], "eos_token_id": metadata["eos_token_id"],
            "pad_token_id": metadata["eos_token_id"][0],
            "decoder": {
                "filename": os.path.basename(model), "head_size": head_dim, "num_key_value_heads": n_kv_heads,
                "num_hidden_layers": n_layers,
                # GenAI reads these two but the graph fixes them; the values only label the run
                "num_attention_heads": n_kv_heads, "hidden_size": n_kv_heads * head_dim,
                "session_options": {"intra_op_num_threads": threads, "inter_op_num_threads": 1,
                                    "provider_options": []},
                "inputs": names,
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
            },
        },
        "search": {"do_sample": False, "num_beams": 1, "max_length": context, "past_present_share_buffer": False},
    }


def link_model(model, directory):
    for suffix in ("", ".data"):
        if os.path.exists(model + suffix):
            os.symlink(os.path.abspath(model + suffix), os.path.join(directory, os.path.basename(model) + suffix))


def generate(model_dir, prompt, n_new, ignore_eos):
    model = og.Model(og.Config(model_dir))
    params = og.GeneratorParams(model)
    # min_length keeps the stop token from ending the run early (GenAI masks it until then).
    params.set_search_options(max_length=len(prompt) + n_new, min_length=len(prompt) + n_new if ignore_eos else 0)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(prompt)
    prefilled = time.perf_counter()
    generator.generate_next_token()  # the first pick reads the prompt's logits: no forward pass
    steps = 0
    decode_start = time.perf_counter()
    while steps < n_new - 1 and not generator.is_done():
        generator.generate_next_token()
        steps += 1
    end = time.perf_counter()
    print_result(prompt, prefilled - start, steps, end - decode_start, generator.get_sequence(0))


def main():
    parser = peer_arguments(__doc__, "ONNX file with past_key_values.* inputs and present.* outputs")
    parser.add_argument("--ignore-eos", action="store_true", help="generate exactly -n tokens")
    args = parser.parse_args()
    prompt = prompt_of(args, parser)
    with tempfile.TemporaryDirectory() as model_dir:
        config = genai_config(args.model, args.threads, len(prompt) + args.n)
        with open(os.path.join(model_dir, "genai_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        link_model(args.model, model_dir)
        generate(model_dir, prompt, args.n, args.ignore_eos)


if __name__ == "__main__":
    main()
