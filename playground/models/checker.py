"""Type checks for the registry's YAML files (models.yaml, the user's kept pairs): each failure reads
'<file>: <field path>: expected <what>, got <value>', like a form's error, not a loader's stack trace."""

from __future__ import annotations

from playground.config import check_value


class Checker:
    """Type checks that raise ValueError('<file>: <field path>: expected <what>, got <value>')."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, where: str, expected: str, got) -> None:
        shown = repr(got) if len(repr(got)) <= 80 else repr(got)[:77] + "..."
        raise ValueError(f"{self.file}: {where or '(top level)'}: expected {expected}, got {shown}")

    def mapping(self, where, value, required=(), optional=None, nonempty=False) -> None:
        """A mapping with string keys; with `optional` given, no keys beyond required + optional."""
        if not isinstance(value, dict) or (nonempty and not value):
            self.fail(where, "a non-empty mapping" if nonempty else "a mapping", value)
        for key in value:
            if not isinstance(key, str):
                self.fail(where, "string keys", key)
        for key in required:
            if key not in value:
                self.fail(f"{where}.{key}".lstrip("."), "a value (the field is required)", None)
        if optional is not None:
            allowed = tuple(required) + tuple(optional)
            for key in value:
                if key not in allowed:
                    expected = f"no such field (allowed: {', '.join(allowed)})"
                    self.fail(f"{where}.{key}".lstrip("."), expected, key)

    def string(self, where, value, empty_ok=False) -> str:
        if not isinstance(value, str) or (not empty_ok and not value.strip()):
            self.fail(where, "a string" if empty_ok else "a non-empty string", value)
        return value

    def choice(self, where, value, allowed) -> str:
        if value not in allowed or not isinstance(value, str):
            self.fail(where, f"one of {', '.join(allowed)}", value)
        return value

    def boolean(self, where, value) -> bool:
        if not isinstance(value, bool):
            self.fail(where, "true or false", value)
        return value

    def integer(self, where, value, low, high) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(where, f"an integer from {low} to {high}", value)
        return value

    def knob(self, where, k, value):
        """A suggested knob value, held to the run configuration's own range for that knob."""
        try:
            check_value(k, value)
        except ValueError:
            kind = "an integer" if k.kind is int else "a number"
            self.fail(where, f"{kind} in [{k.low}, {k.high}]" if not k.choices else f"one of {k.choices}", value)
        return value

    def fraction(self, where, value) -> float:
        """A rate strictly between 0 and 1 (an acceptance rate of 0 or 1 leaves no γ to choose)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            self.fail(where, "a number between 0 and 1 (both excluded)", value)
        return float(value)

    def number(self, where, value, low, high) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            self.fail(where, f"a number from {low} to {high}", value)
        return float(value)
