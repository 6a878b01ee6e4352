"""Settings grids: `--sweep gamma=1,2,4,8 temperature=0,0.7 draft_vocab=0,65536` -> one RunConfig per
combination. Decoding knobs and the draft's own knobs alike (drafter kind, n-gram sizes, draft
vocabulary, draft quantization, tree shape): comparing drafts for one target is a sweep too."""

from __future__ import annotations

import itertools

from playground.config import KNOBS, group, parse_text

SWEEPABLE = [k.name for k in KNOBS.values() if k.sweep]  # the knobs a grid may vary, in field order
# The settings a report records per run: the decoding knobs, then what shapes the draft
DRAFT_SETTINGS = (*(k.name for k in group("drafter")), "draft_quantization")
SETTINGS = (*(k.name for k in group("decoding")), *DRAFT_SETTINGS)


class SettingError(ValueError):
    """A bad value, with the command-line flag it came from."""

    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag


def parse_sweep(items: list[str] | None) -> dict[str, list]:
    """["gamma=1,2", "temperature=0,0.7"] -> {"gamma": [1, 2], "temperature": [0.0, 0.7]}."""
    grid: dict[str, list] = {}
    for item in items or []:
        key, _, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in SWEEPABLE or not values:
            raise SettingError("--sweep", f"expected KEY=V1,V2,... with KEY one of {', '.join(SWEEPABLE)}, "
                                          f"got {item!r}")
        if key in grid:
            raise SettingError("--sweep", f"{key} is swept twice")
        try:
            grid[key] = [parse_text(KNOBS[key], v) for v in values.split(",")]
        except ValueError as error:
            raise SettingError("--sweep", str(error)) from None
    return grid


def expand(base: dict, grid: dict[str, list]) -> list:
    """Every combination of the swept values over the base settings (RunConfig fields), each
    validated by RunConfig: a cross-field error (ngram_max < ngram_min) names --sweep or the flag."""
    keys = list(grid)
    cells = []
    for values in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        settings = {**base, **dict(zip(keys, values))}
        cells.append(make_cell(settings, swept=set(keys)))
    return cells


def make_cell(settings: dict, swept: set[str]):
    """RunConfig's own checks, re-raised with the flag (or the sweep entry) the value came from."""
    from playground.config import RunConfig

    try:
        return RunConfig(**settings)
    except ValueError as error:
        field = str(error).split(" ", 1)[0]
        flag = "--sweep" if field in swept or field not in KNOBS else KNOBS[field].flag
        raise SettingError(flag, str(error)) from None


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
