"""The Served tab: vLLM (or llama.cpp) deployments raced and swept on this machine."""
