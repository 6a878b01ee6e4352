"""`python -m playground.serve`: served engines from the command line (see __main__.py)."""
