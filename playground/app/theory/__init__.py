"""The theory tab: layout, handlers and figures together."""
