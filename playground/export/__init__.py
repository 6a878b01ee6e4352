"""The playground's settings as ready-to-paste configuration for where people serve models:
vLLM, llama.cpp's llama-server and transformers' generate(assistant_model=...).

Pure: settings in, text out; no torch, no network. Option names change between releases, so
each was looked up in the tool's source or docs, at the versions in CHECKED (settings.py); a name that
is not listed there is not emitted. Each drafter gets the tool's same thing where the tool has one, else
the nearest thing it has, and a sentence saying so (EQUIVALENTS, read by every snippet and the caveats).

Each tool in a file of its own: settings.py (what an export is written from), equivalents.py (each drafter
in each tool), vllm.py, llamacpp.py, generate.py (transformers), caveats.py.
"""

from __future__ import annotations

from playground.export.caveats import caveats
from playground.export.equivalents import (ASSISTANT, EARLY_EXIT, EQUIVALENTS, LOOKUP, NGRAM_MOD, Equivalent,
                                           difference_comment)
from playground.export.generate import Snippet, early_exit_layers, transformers_snippet
from playground.export.llamacpp import llamacpp_server, spec_type_flags
from playground.export.settings import (CHECKED, EXAMPLE_MESSAGE, ExportSettings, ModelRef, from_settings,
                                        model_ref, pack_file)
from playground.export.vllm import (METHOD_LABELS, PLAIN, VLLM_KEYS, VLLM_METHODS, serve_command, vllm_config,
                                    vllm_python, vllm_sampling, vllm_serve, vllm_serve_args)

__all__ = ["ASSISTANT", "CHECKED", "EARLY_EXIT", "EQUIVALENTS", "EXAMPLE_MESSAGE", "Equivalent", "ExportSettings",
           "LOOKUP", "METHOD_LABELS", "ModelRef", "NGRAM_MOD", "PLAIN", "Snippet", "VLLM_KEYS", "VLLM_METHODS",
           "caveats", "difference_comment", "early_exit_layers", "from_settings", "llamacpp_server", "model_ref",
           "pack_file", "serve_command", "spec_type_flags", "transformers_snippet", "vllm_config", "vllm_python",
           "vllm_sampling", "vllm_serve", "vllm_serve_args"]
