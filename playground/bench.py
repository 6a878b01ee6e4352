"""`python -m playground.bench`: the benchmark's command (measure/bench/cli.py). A module of its own so
the command users know stays short while the code lives in the measurement layer."""

from playground.measure.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
