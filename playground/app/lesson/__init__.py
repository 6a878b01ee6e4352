"""The lesson tab: layout, handlers and figures together."""
