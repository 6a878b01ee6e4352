"""The models already on this machine: found in the stores people keep them in (the Hugging Face cache,
Ollama, LM Studio, llama.cpp's cache, folders named with --models-dir), read from their metadata only,
and paired: for a target, which model can draft for it, how (same tokenizer or through the text), and
why not. `python -m playground.models scan` and the page's "Your models" tab show it.

    from playground.models.scan import listing, stores
    found = listing.scan(stores.locations(["~/models"]))
"""
