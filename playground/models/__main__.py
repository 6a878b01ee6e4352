"""`python -m playground.models list | fetch | generate`: see cli.py."""

from playground.models.cli import main

raise SystemExit(main())
