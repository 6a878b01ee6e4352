"""Served engines (vLLM, llama.cpp's server) started on 127.0.0.1 and measured through one
OpenAI-compatible client, on the same prompts and into the same JSON as our engine."""
