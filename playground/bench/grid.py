"""Settings grids: `--sweep gamma=1,2,4,8 temperature=0,0.7` -> one SpecConfig per combination."""

from __future__ import annotations

import itertools

from ..config import KNOBS, group, parse_text

SWEEPABLE = [k.name for k in group("decoding") if k.sweep]  # the decoding knobs a grid may vary


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
    """Every combination of the swept values over the base settings, each validated by SpecConfig."""
    keys = list(grid)
    configs = []
    for values in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        settings = {**base, **dict(zip(keys, values))}
        configs.append(make_config(settings, swept=set(keys)))
    return configs


def make_config(settings: dict, swept: set[str]):
    """SpecConfig's own checks, re-raised with the flag (or the sweep entry) the value came from."""
    from ..engine import SpecConfig  # torch: imported when a run is planned, not for --help

    try:
        return SpecConfig(**settings)
    except ValueError as error:
        field = str(error).split(" ", 1)[0]
        flag = "--sweep" if field in swept or field not in KNOBS else KNOBS[field].flag
        raise SettingError(flag, str(error)) from None


def settings_of(config) -> dict:
    """A SpecConfig's decoding knobs, by their run-configuration names."""
    return {k.name: getattr(config, k.name) for k in group("decoding")}
