"""v(k) curves measured on this machine, kept across starts (verify_curves.json in the cache).

A session's curves (verify_cost.VerifyCurves) are keyed by the model's name and forgotten when the app
stops, so an estimate made before a race assumed v = 1 for every model not measured in this session,
even one whose twin (same file under another name, same shape) was measured yesterday: the default
pair's own files were estimated at 1.31× and raced at 1.15×. What v(k) depends on is the shape of the
tensors (models/shape.py), the runner, the quantization and dtype as loaded, the device, the machine
and the run's context (its bucket: runners/choice.bucket_of); a curve is kept under those, and found
for any model that matches them, at the run's bucket or else the nearest kept. A record kept before
the context was is read as the shortest bucket's: it was measured after a 200-entry prefix.

The file is written whole (config.write_text_atomic). One that does not read back entirely (damaged,
edited, an older layout) is ignored, never trusted in part, and replaced by the next curve measured.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from playground.engine.runners.choice import SHORTEST, bucket_of, nearest_first
from playground.measure.bench.verify_cost import VerifyCurve
from playground.models.shape import Shape

log = logging.getLogger(__name__)
FILE = "verify_curves.json"
VERSION = 1


@dataclass(frozen=True)
class Stored:
    """One kept curve and what it was measured on."""

    curve: VerifyCurve
    shape: Shape
    runner: str  # resolved (onnxruntime, eager, ...)
    quantization: str  # as loaded: none | int4-cpu | nf4 | ...
    dtype: str
    device: str
    machine: str  # machine_name(device)
    model: str  # the name it was measured under (said, not matched)
    measured: str  # ISO date

    def said(self) -> str:
        return (f"measured here on {self.measured} for a model of the same shape ({self.shape.said()}) through "
                f"{self.runner} ({self.quantization}, {self.dtype}, {self.device}), to k = {len(self.curve.v)}, "
                f"for runs up to {self.curve.context} entries")

    def record(self) -> dict:
        return {"architecture": self.shape.architecture, "parameters": self.shape.parameters,
                "weights": self.shape.weights, "runner": self.runner, "quantization": self.quantization,
                "dtype": self.dtype, "device": self.device, "machine": self.machine, "model": self.model,
                "measured": self.measured, "v": list(self.curve.v), "step_s": self.curve.step_s,
                "rows": list(self.curve.rows), "compile_s": self.curve.compile_s, "context": self.curve.context}

    def key(self) -> tuple:
        return (self.shape, self.runner, self.quantization, self.dtype, self.device, self.machine, self.curve.context)


def from_record(r: dict) -> Stored:
    """A record read back; raises (KeyError, TypeError, ValueError) on anything it does not hold whole."""
    text = ("architecture", "weights", "runner", "quantization", "dtype", "device", "machine", "model", "measured")
    if not isinstance(r, dict) or not all(isinstance(r[k], str) for k in text):
        raise ValueError(f"not a curve record: {r!r}")
    v = tuple(float(x) for x in r["v"])
    if not v or v[0] != 1.0 or float(r["step_s"]) <= 0 or int(r["parameters"]) <= 0:
        raise ValueError(f"not a measured curve: {r!r}")
    context = int(r.get("context", SHORTEST))
    if context != bucket_of(context):
        raise ValueError(f"not a context bucket: {context!r}")
    curve = VerifyCurve(v, float(r["step_s"]), rows=tuple(int(x) for x in r["rows"]), compile_s=float(r["compile_s"]),
                        context=context)
    return Stored(curve, Shape(r["architecture"], int(r["parameters"]), r["weights"]), r["runner"],
                  r["quantization"], r["dtype"], r["device"], r["machine"], r["model"], r["measured"])


def machine_name(device: str) -> str:
    """What a curve was measured on: the CPU's name and the cores this process may use (v(k) moves with
    both), or the GPU's name."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(device)
    from playground.measure.bench.machine import cpu_model, usable_cores

    return f"{cpu_model()}, {usable_cores()} cores"


class CurveStore:
    """The kept curves, read from the file on every look (another process may have measured since).
    Owned by whoever measures (the app's RunnerCosts, the benchmark), not a module global. `path`:
    $PLAYGROUND_VERIFY_CURVES (the tests point it at their own), else the cache's verify_curves.json."""

    def __init__(self, path: Path | None = None):
        self.given = Path(path) if path is not None else None
        self.lock = threading.Lock()

    @property
    def path(self) -> Path:
        if self.given is not None:
            return self.given
        if os.environ.get("PLAYGROUND_VERIFY_CURVES"):
            return Path(os.environ["PLAYGROUND_VERIFY_CURVES"]).expanduser()
        from playground.config import cache_dir

        return cache_dir() / FILE

    def read(self) -> list[Stored]:
        """Every kept curve, or none where the file is missing or does not read back whole."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}")
            return [from_record(r) for r in data["curves"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s ignored (%s: %s); the next curve measured replaces it", self.path, type(e).__name__, e)
            return []

    def keep(self, stored: Stored) -> None:
        """`stored` kept, replacing the curve kept under the same key; a failed write is logged, not raised:
        the measurement it follows is what the caller needs."""
        from playground.config import write_text_atomic

        with self.lock:
            kept = [s for s in self.read() if s.key() != stored.key()] + [stored]
            text = json.dumps({"version": VERSION, "curves": [s.record() for s in kept]}, indent=1)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(self.path, text)
            except OSError as e:
                log.warning("could not keep the measured v(k) in %s: %s", self.path, e)

    def save(self, curve: VerifyCurve, loaded, runner: str) -> Stored | None:
        """Keep the curve of a LoadedModel measured through `runner` (resolved); None where the model's
        shape cannot be read (then nothing is kept: a curve no other model can match is no use)."""
        from playground.models.shape import of_loaded

        try:
            shape = of_loaded(loaded.model)
        except Exception as e:  # its file gone or unreadable since the load: the curve is measured, only not kept
            log.warning("%s: its shape could not be read (%s); its v(k) is not kept", loaded.name, e)
            return None
        if shape is None:
            return None
        stored = Stored(curve, shape, runner, loaded.quantization, loaded.dtype, loaded.device,
                        machine_name(loaded.device), loaded.name, date.today().isoformat())
        self.keep(stored)
        return stored

    def find(self, shape: Shape, device: str, quantization: str | None = None, runner: str | None = None,
             dtype: str | None = None, context: int | None = None) -> Stored | None:
        """The curve kept for a model of this shape on this device and machine, through `runner` and at
        `quantization` and `dtype` where given (any, where None: the stored one says which), for a run of
        `context` entries (None: a short one): at its bucket, else the nearest bucket kept (the shorter of
        two as near); the latest kept among those (the file keeps them in the order measured)."""
        found = [s for s in self.read() if s.shape == shape and s.device == device
                 and quantization in (None, s.quantization) and runner in (None, s.runner) and dtype in (None, s.dtype)]
        here = machine_name(device) if found else ""  # a GPU's name asks CUDA: only where one may match
        found = [s for s in found if s.machine == here]
        kept = {s.curve.context for s in found}
        closest = next((bucket for bucket in nearest_first(context) if bucket in kept), None)
        found = [s for s in found if s.curve.context == closest]
        return found[-1] if found else None
