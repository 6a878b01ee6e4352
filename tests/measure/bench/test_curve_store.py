"""v(k) kept across starts (measure/bench/curve_store.py): a curve measured on the tiny model is found for
any model record of the same shape, runner, quantization and device on this machine, and for no other;
a new store reading the same file finds it; a damaged file is ignored whole and replaced."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from playground.measure.bench.curve_store import CurveStore
from playground.measure.bench.verify_cost import VerifyCurve, VerifyCurves
from playground.models.scan.listing import Model
from playground.models.shape import of_loaded, of_scanned


@pytest.fixture()
def loaded():
    """A LoadedModel's fields as the store reads them: the tiny target, unquantized, on the CPU."""
    from playground.models.tiny import tiny_pair

    target, _, _ = tiny_pair(0)
    return SimpleNamespace(name="tiny-target", model=target, quantization="none", dtype="float32", device="cpu")


def record_like(loaded, **changed) -> Model:
    """A scanned model of the loaded one's shape under another name (another store, another path)."""
    shape = of_loaded(loaded.model)
    fields = dict(architecture=shape.architecture, parameters=shape.parameters, quantization=shape.weights)
    return Model("someone-else:tiny", "ollama", "/elsewhere/blob", "gguf", **{**fields, **changed})


def test_a_measured_curve_serves_every_model_of_its_shape_and_no_other(loaded, tmp_path):
    store = CurveStore(tmp_path / "verify_curves.json")
    curve = VerifyCurves("eager", store).measure(loaded, max_k=3, repeats=1)
    twin = of_scanned(record_like(loaded))
    found = store.find(twin, "cpu", "none")
    assert found is not None and found.curve.v == curve.v and found.runner == "eager"
    assert found.model == "tiny-target" and "same shape (qwen2, " in found.said() and "through eager" in found.said()
    assert store.find(twin, "cpu", "none", runner="eager") is not None
    assert store.find(twin, "cpu", "none", runner="onnxruntime") is None  # another runner
    assert store.find(twin, "cpu", "int4-cpu") is None  # another quantization as loaded
    assert store.find(twin, "cuda", "none") is None  # another device
    assert store.find(of_scanned(record_like(loaded, parameters=twin.parameters + 1)), "cpu", "none") is None
    assert store.find(of_scanned(record_like(loaded, quantization="Q4_K_M")), "cpu", "none") is None
    assert store.find(of_scanned(record_like(loaded, architecture="llama")), "cpu", "none") is None


def test_a_kept_curve_survives_a_new_store_and_a_newer_one_replaces_it(loaded, tmp_path):
    path = tmp_path / "verify_curves.json"
    first = CurveStore(path).save(VerifyCurve((1.0, 1.4, 2.0), 0.01), loaded, "onnxruntime")
    again = CurveStore(path)  # as a later start reads it
    assert again.find(first.shape, "cpu", "none").curve.v == (1.0, 1.4, 2.0)
    again.save(VerifyCurve((1.0, 1.2), 0.02), loaded, "onnxruntime")
    assert CurveStore(path).find(first.shape, "cpu", "none").curve.v == (1.0, 1.2)
    assert len(json.loads(path.read_text())["curves"]) == 1  # one per shape, runner, quantization, device


def test_the_default_store_is_the_one_the_environment_names(loaded, kept_curves):
    CurveStore().save(VerifyCurve((1.0, 1.5), 0.01), loaded, "eager")
    assert kept_curves.is_file() and CurveStore(kept_curves).read()


@pytest.mark.parametrize("text", ["{not json", '{"version": 1, "curves": [{"architecture": "qwen2"}]}', "[]",
                                  '{"version": 99, "curves": []}'])
def test_a_damaged_file_is_ignored_whole_and_replaced_by_the_next_curve(loaded, tmp_path, text):
    path = tmp_path / "verify_curves.json"
    store = CurveStore(path)
    kept = store.save(VerifyCurve((1.0, 1.3), 0.01), loaded, "eager")
    good = json.loads(path.read_text())["curves"][0]
    if text == "[]":  # one good record beside a damaged one: not trusted in part
        text = json.dumps({"version": 1, "curves": [good, {**good, "v": ["x"]}]})
    path.write_text(text)
    assert store.find(kept.shape, "cpu", "none") is None
    store.save(VerifyCurve((1.0, 1.1), 0.01), loaded, "eager")
    assert [s.curve.v for s in CurveStore(path).read()] == [(1.0, 1.1)]


def test_a_curve_from_another_machine_is_not_this_ones(loaded, tmp_path):
    path = tmp_path / "verify_curves.json"
    kept = CurveStore(path).save(VerifyCurve((1.0, 1.3), 0.01), loaded, "eager")
    data = json.loads(path.read_text())
    data["curves"][0]["machine"] = "some other CPU, 64 cores"
    path.write_text(json.dumps(data))
    assert CurveStore(path).read() and CurveStore(path).find(replace(kept.shape), "cpu", "none") is None
