"""Measurement, split by job: bench/ (the benchmark), teach/ (the maths the teaching tabs draw),
hardware/ (timing commands for one GPU or CPU). Under both the app and the command line; imports
the engine and models, never the app. Nothing heavy here."""
