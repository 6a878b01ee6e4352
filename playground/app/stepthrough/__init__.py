"""The stepthrough tab: layout, handlers and figures together."""
