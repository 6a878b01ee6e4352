"""Checkpoint directories a server loads: the tiny pair saved to disk (head_dim 64, which vLLM's
CPU attention supports; the in-process tiny pair's 16 it refuses), and the cached checkpoints of
a registry pair, found without loading them."""

from __future__ import annotations

from pathlib import Path

SERVED_HIDDEN = 256  # 4 heads of 64


def save_tiny_pair(folder: Path, seed: int = 0, target_layers: int = 4, draft_layers: int = 1,
                   hidden: int = SERVED_HIDDEN) -> tuple[Path, Path]:
    """The tiny pair (early-exit draft), float32, saved with its tokenizer; (target_dir, draft_dir).
    Written once: folders that already hold a config.json are reused."""
    import torch

    from playground.models.tiny import byte_tokenizer, early_exit_draft, tiny_model

    folder = Path(folder)
    target_dir, draft_dir = folder / "target", folder / "draft"
    if (target_dir / "config.json").is_file() and (draft_dir / "config.json").is_file():
        return target_dir, draft_dir
    tokenizer = byte_tokenizer()
    target = tiny_model(len(tokenizer), target_layers, seed, hidden=hidden).to(torch.float32)
    draft = early_exit_draft(target, draft_layers).to(torch.float32)
    for model, out in ((target, target_dir), (draft, draft_dir)):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return target_dir, draft_dir


def cached_checkpoint(spec, report=lambda message, fraction: None) -> Path:
    """The local checkpoint directory of a registry model (hub cache, local dir, or converted
    pack), as the playground's own loader would find it; SourceError-style RuntimeError if none."""
    from playground.models.checkpoints import hub_checkpoint, local_checkpoint, pack_checkpoint

    failures = []
    for source in spec.sources:
        try:
            if source.kind == "hub":
                return hub_checkpoint(source, spec, report)
            if source.kind == "local":
                return local_checkpoint(Path(source.ref), report)
            if source.kind == "pack":
                return pack_checkpoint(source.ref, report)
        except Exception as e:  # the next source is tried, as the loader does
            failures.append(f"{source.kind} {source.ref}: {e}")
    raise RuntimeError(f"{spec.name}: no checkpoint on disk a server can load ({'; '.join(failures) or 'tiny only'})")
