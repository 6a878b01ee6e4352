"""The export tab: layout, handlers and figures together."""
