"""The explorer tab: layout, handlers and figures together."""
