"""Models: models.yaml → registry → sources (hub | local | GGUF | model pack | tiny) → checkpoint →
quantization → device. Imports config and nothing above it; nothing heavy here."""
