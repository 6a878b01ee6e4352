"""Writing results: JSON (everything), CSV (one tidy table), all written atomically.

A report is a dict: {"schema", "created", "command", "config", "models", "environment", "memory",
"runs": [{"settings", "summary", "categories", "prompts", "skipped", "draft"}, ...]}, one run per
cell of the sweep (measure/bench/sweep.py writes it, for the benchmark and the Sweep tab alike); each
run's summary also holds its peak memory.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import secrets
from pathlib import Path

from playground.config import group

SCHEMA = "playground.bench/1"
# The settings a report records per run: the decoding knobs, then what shapes the draft
DRAFT_SETTINGS = ("draft", *(k.name for k in group("drafter")), "draft_quantization")
SETTINGS = (*(k.name for k in group("decoding")), *DRAFT_SETTINGS, "runner")  # the runner: how both runs' forwards ran


def settings_of(run) -> dict:
    """A run's settings as a report records them, by their run-configuration names."""
    return {name: getattr(run, name) for name in SETTINGS}


def varying(runs: list[dict]) -> list[str]:
    """The settings that differ between a report's runs (what a table must label them by)."""
    return [k for k in SETTINGS if len({repr(r["settings"].get(k)) for r in runs}) > 1]


def label(settings: dict, keys: list[str]) -> str:
    """A run's short name: γ and T, then each of `keys` (the settings that vary) besides those."""
    shown = [f"gamma={settings['gamma']}{'+' if settings.get('adaptive') else ''}", f"T={settings['temperature']}"]
    return " ".join(shown + [f"{k}={settings.get(k)}" for k in keys if k not in ("gamma", "temperature")])


def cell(value, fmt: str, missing: str = "-") -> str:
    """A summary value for a table (the console's, the HTML page's): formatted, or `missing` for None."""
    if value is None:
        return missing
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def describe_pair(pair) -> dict:
    """The report's "models": a loaded pair's target and draft as they ran."""
    def model(m):
        return {"name": m.name, "device": m.device, "dtype": m.dtype, "quantization": m.quantization,
                "footprint_bytes": m.footprint_bytes, "source": str(m.source) if m.source else None}
    return {"pair": pair.name, "random_weights": pair.random_weights, "target": model(pair.target),
            "draft": model(pair.draft)}


def atomic_write(path, data: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename over it: a reader never sees half a
    file, and an interrupted run leaves the old file (or none), not a truncated one.

    The temp file is created with mode 0o666 and the kernel applies the umask, as for any new file:
    reading the umask (os.umask sets it) would change it for every thread for a moment."""
    path = Path(path)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"could not create a temporary file beside {path}")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(report: dict, path) -> None:
    atomic_write(path, json.dumps(clean(report), indent=2) + "\n")


def clean(value):
    """JSON has no NaN or infinity: report them as null rather than emit invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def csv_rows(report: dict) -> list[dict]:
    """One row per prompt and setting, then a row per category and an overall row for each setting."""
    rows = []
    for run in report["runs"]:
        settings = {k: run["settings"].get(k) for k in SETTINGS}  # older reports lack the draft's
        for record in run["prompts"]:
            rows.append({"row": "prompt", **settings, **flatten(record)})
        for category, summary in run["categories"].items():
            rows.append({"row": "category", **settings, "category": category, **flatten(summary)})
        rows.append({"row": "overall", **settings, "category": "all", **flatten(run["summary"])})
    return rows


NESTED = {"divergence_margin": ("baseline", "speculative", "near_tie")}  # dict-valued fields (or None)


def flatten(record: dict) -> dict:
    """Nested fields become prefixed columns: divergence_margin -> divergence_margin_baseline, ..."""
    flat = {}
    for key, value in record.items():
        if key in NESTED:
            flat.update({f"{key}_{part}": (value or {}).get(part) for part in NESTED[key]})
        elif isinstance(value, dict):
            flat.update({f"{key}_{part}": v for part, v in value.items()})
        else:
            flat[key] = value
    return flat


def write_csv(report: dict, path) -> None:
    rows = csv_rows(report)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, buffer.getvalue())
