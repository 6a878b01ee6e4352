"""The benchmark: our engine timed against itself (speculative vs autoregressive) and, optionally,
against transformers' generate() and assisted generation, over Spec-Bench or your own prompts.

Run `python -m playground.bench --help`; `python -m playground.bench.gpu_oracle` measures the
verification cost on a GPU with random models of real shapes. Nothing heavy is imported here.
"""
