"""The engine: sampling math (pure tensors), drafters, the cached model and the decoding loop that
turns them into StepEvents. Imports nothing above it (models, measure, app); nothing heavy here."""
