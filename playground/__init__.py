"""Speculative Sampling Playground: see, measure and tune speculative sampling.

The public API is re-exported lazily, so `import playground` stays cheap (no torch at import).
"""

_EXPORTS = {
    "SpecConfig": "engine.generate",
    "generate": "engine.generate",
    "ModelDrafter": "engine.drafters",
    "PromptLookupDrafter": "engine.drafters",
    "StepEvent": "engine.events",
    "DraftToken": "engine.events",
    "summarize": "engine.events",
    "output_tokens": "engine.events",
    "Sampling": "engine.sampling",
    "expected_speedup": "engine.sampling",
    "encode_prompt": "models.text",
    "eos_ids": "models.text",
    "check_same_tokenizer": "models.text",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'playground' has no attribute {name!r}")
