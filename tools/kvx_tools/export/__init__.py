"""Writers of ONNX graphs of the kind torch.onnx.export gives for HF Llama and GPT-2, from llama2.c checkpoints,
Llama GGUF files or random weights, and the SmolLM2 fetcher."""
