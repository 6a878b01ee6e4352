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


def test_a_curve_is_measured_after_half_the_runs_bucket_and_found_at_its_bucket_else_the_nearest(loaded, tmp_path):
    """Issue 52, item 6: v(k) for the run's context. The prefix fills half the bucket (512 entries for a
    run of 700), the curve says its bucket, the store keeps one per bucket and finds the run's, else the
    nearest kept (the shorter of two as near)."""
    from playground.engine.kvcache import CachedModel

    fed = []
    real = CachedModel.feed

    def feed(self, new, keep):
        fed.append(len(self.tokens) + len(new))
        return real(self, new, keep)

    store = CurveStore(tmp_path / "verify_curves.json")
    curves = VerifyCurves("eager", store)
    try:
        CachedModel.feed = feed
        long = curves.measure(loaded, max_k=2, repeats=1, context=700)
    finally:
        CachedModel.feed = real
    assert fed[0] == 512 and long.context == 1024
    short = curves.measure(loaded, max_k=2, repeats=1)  # a short run's: its own curve, measured now
    assert short is not long and short.context == 256
    shape = of_loaded(loaded.model)
    assert store.find(shape, "cpu", context=700).curve.context == 1024
    assert store.find(shape, "cpu", context=100).curve.context == 256
    assert store.find(shape, "cpu", context=3000).curve.context == 1024  # 4096: 1024 is nearest
    assert "for runs up to 1024 entries" in store.find(shape, "cpu", context=700).said()
    assert len(json.loads(store.path.read_text())["curves"]) == 2  # one per bucket


def test_a_curve_kept_before_contexts_reads_as_the_shortest_buckets_and_a_wrong_bucket_voids_the_file(loaded, tmp_path):
    path = tmp_path / "verify_curves.json"
    kept = CurveStore(path).save(VerifyCurve((1.0, 1.3), 0.01), loaded, "eager")
    data = json.loads(path.read_text())
    del data["curves"][0]["context"]  # as a file written before the context was kept
    path.write_text(json.dumps(data))
    assert CurveStore(path).find(kept.shape, "cpu").curve.context == 256  # measured after 200 entries: that bucket
    data["curves"][0]["context"] = 700  # no bucket: the file is not trusted in part
    path.write_text(json.dumps(data))
    assert CurveStore(path).read() == []
