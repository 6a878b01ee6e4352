"""Served engines (vLLM, llama.cpp's server) measured through one OpenAI-compatible client:
environment (vLLM's own venv), launch (start/stop real servers on 127.0.0.1), client (streaming
completions + acceptance counters), bench (the same prompts and JSON as our engine)."""
