"""Speculative Sampling Playground: see, measure and tune speculative sampling.

The public API is re-exported lazily, so `import playground` stays cheap (no torch at import).
"""

_EXPORTS = {
    "SpecConfig": "engine",
    "generate": "engine",
    "ModelDrafter": "drafters",
    "PromptLookupDrafter": "drafters",
    "StepEvent": "events",
    "DraftToken": "events",
    "summarize": "events",
    "output_tokens": "events",
    "Sampling": "sampling",
    "expected_speedup": "sampling",
    "encode_prompt": "text",
    "eos_ids": "text",
    "check_same_tokenizer": "text",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'playground' has no attribute {name!r}")
