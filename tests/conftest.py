import pytest

from playground.tiny import tiny_model, tiny_pair


@pytest.fixture(scope="session")
def pair():
    """(target, draft, tokenizer): a 4-layer random Qwen2 and its 1-layer early-exit draft."""
    return tiny_pair(seed=0)


@pytest.fixture(scope="session")
def small_vocab_pair():
    """Two independent random models over 8 tokens: q differs a lot from p, so every branch of
    Algorithm 1 fires often and a wrong rule shows up in a few thousand draws."""
    return tiny_model(8, 2, seed=11, logit_scale=0.25), tiny_model(8, 1, seed=12, logit_scale=0.25)
