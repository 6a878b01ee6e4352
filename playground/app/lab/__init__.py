"""The lab tab: layout, handlers and figures together."""
