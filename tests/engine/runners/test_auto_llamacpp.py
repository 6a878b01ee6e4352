"""auto with the llama.cpp extra installed (runners/auto.py, issue 48): a model loaded from a GGUF has
llama.cpp's kernels timed beside eager's and ONNX Runtime's, each candidate's plain step and, for a
pair's target, its verification; the runner kept is the one whose plain step and verification cost
least together, so a runner fast at one token but slow at verifying is not kept for a target. The
clock is a stand-in: each runner's forward advances it by a planted cost per step shape."""

import pytest

pytestmark = pytest.mark.llamacpp
pytest.importorskip("llama_cpp", reason="the optional extra: python -m playground.serve setup llamacpp (docs/runners.md)")

import weakref  # noqa: E402

from playground.engine.kvcache import CachedModel  # noqa: E402
from playground.engine.runners import auto, choice, resolve, timing  # noqa: E402
from playground.engine.runners.eager import EagerRunner  # noqa: E402
from playground.engine.runners.llamacpp import LlamaCppRunner  # noqa: E402
from playground.engine.runners.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from tiny_gguf import cache, gguf, load  # noqa: E402, F401 (fixtures)

PLAIN = {"eager": 10.0, "onnxruntime": 8.0, "llamacpp": 6.0}  # ms a one-token step


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """Choices in a file of the test's own; each forward advances the fake clock by its planted cost:
    PLAIN for one token, `verify[runner]` for auto.VERIFY_ROWS tokens (the prompt's cost is untimed)."""
    monkeypatch.setattr(choice, "choice_file", lambda: tmp_path / "runner-choice.json")
    monkeypatch.setattr(choice, "SEEN", weakref.WeakKeyDictionary())
    now, verify = [0.0], {}
    monkeypatch.setattr(timing, "clock", lambda device: now[0])
    for runner in (EagerRunner, OnnxRuntimeRunner, LlamaCppRunner):
        def forward(self, new, *args, _real=runner.forward, **kwargs):
            now[0] += (PLAIN[self.name] if len(new) == 1 else verify.get(self.name, 0.0)) / 1000
            return _real(self, new, *args, **kwargs)
        monkeypatch.setattr(runner, "forward", forward)
    return verify


@pytest.mark.parametrize("verify_llamacpp, kept", [(30.0, "onnxruntime"), (9.0, "llamacpp")])
def test_llamacpp_is_timed_and_kept_only_where_its_steps_and_verification_cost_least(
        gguf, cache, planted, verify_llamacpp, kept):
    planted.update({"eager": 12.0, "onnxruntime": 10.0, "llamacpp": verify_llamacpp})
    handle = load(gguf[0]).model
    assert auto.candidates(handle) == ("eager", "onnxruntime", "llamacpp")
    picked = auto.record(handle, verifies=True)
    assert picked["step_ms"] == pytest.approx(PLAIN) and picked["verify_ms"] == pytest.approx(planted)
    assert picked["runner"] == kept  # llama.cpp's one-token step is the fastest in both cases
    assert resolve("auto", "cpu", model=handle) == kept and CachedModel(handle).runner.name == kept
    assert "llama-cpp-python" in next(iter(choice.read_all()))  # installing or updating the extra re-measures


def test_a_draft_is_chosen_by_its_plain_step_alone(gguf, cache, planted):
    planted.update({"eager": 12.0, "onnxruntime": 10.0, "llamacpp": 30.0})
    handle = load(gguf[0]).model
    picked = auto.record(handle)  # a draft's choice: it never verifies
    assert picked["runner"] == "llamacpp" and "verify_ms" not in picked
