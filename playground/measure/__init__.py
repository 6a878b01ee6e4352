"""Measurement: timing, warm-up, alternation, pooled α/c/v, v(k), sweeps, reports, the lab and the
benchmark's CLI (`python -m playground.bench`). One layer under both the app and the command line;
imports the engine and models, never the app. Nothing heavy here."""
