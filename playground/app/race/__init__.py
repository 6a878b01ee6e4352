"""The race tab: layout, handlers and figures together."""
