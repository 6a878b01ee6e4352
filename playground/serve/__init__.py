"""`python -m playground.serve`: installers of optional engines (vLLM's own venv, the llama.cpp
extra). Standard library only, so they run before the project's venv has anything."""
