"""The Gradio app: `demo.build_demo` lays out one room per tab (app/<tab>/), each importing only
app/shared and the layers below. Nothing heavy here."""
