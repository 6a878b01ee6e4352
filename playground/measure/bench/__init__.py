"""The benchmark (`python -m playground.bench`): timed runs, summaries, the sweep, reports, charts,
the console and its CLI; references/ times other engines' own loops, served/ served engines."""
