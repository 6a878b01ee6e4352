"""What every tab may use: the session context, controls derived from the run configuration,
handler flow, rendering of events, the plot style, examples."""
