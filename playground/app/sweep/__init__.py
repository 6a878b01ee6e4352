"""The sweep tab: layout, handlers and figures together."""
