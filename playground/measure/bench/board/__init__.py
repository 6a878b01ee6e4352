"""The drafts board: every way of drafting for one target, on the same prompts, measured by the
one sweep (sweep.measure) and shown side by side. A preset of the sweep, not a second benchmark: its
report is the benchmark's own, with each run naming its board entry.

lineup.py   which entries, as `--drafters` and the page write them, and the probe round as a plan
rounds.py   the probe, the best γ its per-position counts and the target's v(k) call for, the
            second round at that γ
table.py    what the report shows: the leaderboard, the winners, the map's grid, the coverage
charts.py   the speedup map and the coverage grid, for the page and the CLI's PNG alike
cli.py      `python -m playground.bench --drafters ...`
"""
