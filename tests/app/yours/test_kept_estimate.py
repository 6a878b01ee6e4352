"""The Your models tab's estimate reads v(k) this machine kept for a model of the target's shape (issue 53,
item 5): the default pair's files were estimated at 1.31× with v assumed 1 and raced at 1.15×, though
the same shapes had been measured here. Handlers' inputs only: a scan record, a fake context, no model
of real weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from playground.app.yours.picks import estimate_of
from playground.measure.bench.curve_store import CurveStore
from playground.measure.bench.verify_cost import VerifyCurve
from playground.measure.teach.theory import RunnerCosts
from playground.models.scan.listing import Model
from playground.models.shape import of_loaded

CURVE = (1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8)  # a CPU's v(k): each row costs


@pytest.fixture()
def loaded():
    from playground.models.tiny import tiny_pair

    target, _, _ = tiny_pair(0)
    return SimpleNamespace(name="qwen-as-raced", model=target, quantization="none", dtype="float32", device="cpu")


def context(loaded, store: CurveStore):
    """A context holding the scan of one model of the loaded one's shape, under another name and path."""
    shape = of_loaded(loaded.model)
    model = Model("qwen-as-found", "lm studio", "/models/qwen.gguf", "gguf", shape.architecture, shape.parameters,
                  "F32", usable=True)  # published in float32: it loads unquantized (userpairs.load_as)
    found = SimpleNamespace(named=lambda name: model if name == model.name else (_ for _ in ()).throw(ValueError()))
    return SimpleNamespace(costs=RunnerCosts(store), found=found)


def chosen():
    return SimpleNamespace(target="qwen-as-found", alpha=0.8, alpha_said="assumed", c=0.1)


def test_the_estimate_uses_the_curve_kept_for_a_model_of_the_same_shape(loaded, tmp_path):
    store = CurveStore(tmp_path / "verify_curves.json")
    plain = estimate_of(context(loaded, store), chosen())
    assert plain.v is None and plain.v_said.startswith("assumed 1")
    loaded.model.config.dtype = "F32"  # the scanned file's weight type: the same shape
    store.save(VerifyCurve(CURVE, 0.01), loaded, "onnxruntime")
    kept = estimate_of(context(loaded, store), chosen())  # a later start: a new context, the same file
    assert kept.v == CURVE and kept.speedup < plain.speedup
    assert kept.v_said.startswith("measured here on ") and "for a model of the same shape (qwen2, " in kept.v_said
    assert "through onnxruntime" in kept.v_said and "v(k) measured here on" in kept.line()


def test_a_curve_kept_for_another_quantization_leaves_v_assumed(loaded, tmp_path):
    store = CurveStore(tmp_path / "verify_curves.json")
    loaded.model.config.dtype = "F32"
    store.save(VerifyCurve(CURVE, 0.01), SimpleNamespace(**{**vars(loaded), "quantization": "int4-cpu"}), "onnxruntime")
    assert estimate_of(context(loaded, store), chosen()).v_said.startswith("assumed 1")
