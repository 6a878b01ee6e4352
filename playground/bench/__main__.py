"""`python -m playground.bench`: see cli.py."""

from .cli import main

raise SystemExit(main())
