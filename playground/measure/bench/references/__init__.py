"""Other engines' own decoding loops on the same prompts, as rows of the benchmark's report:
transformers' assisted generation and llama.cpp's plain decoding."""
