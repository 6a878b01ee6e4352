"""Speculative Sampling Playground: `python app.py` serves the app on http://127.0.0.1:7860.

`demo` is built at import without loading any model (pairs load on the first run), so
`gradio app.py` and tests can import it.
"""

from __future__ import annotations

import argparse
import signal

from playground.app.demo import build_demo

demo = build_demo()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (0.0.0.0: every interface)"
    )
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also serve through a public gradio.live link")
    parser.add_argument(
        "--config", help="models.yaml to read (default: $PLAYGROUND_CONFIG, else the repository's)"
    )
    parser.add_argument(
        "--pair", help="pair selected when the page opens (e.g. tiny: random weights, no download; or a pair "
                       "kept from the Your models tab or `python -m playground.models pair`)"
    )
    parser.add_argument(
        "--models-dir", action="append", default=[], metavar="DIR",
        help="a folder of models (GGUF files, checkpoint folders) the Your models tab scans beside Ollama's, "
             "LM Studio's, llama.cpp's and the Hugging Face cache; repeatable"
    )
    args = parser.parse_args(argv)
    try:
        changed = args.config or args.pair or args.models_dir
        app = demo if not changed else build_demo(args.config, default_pair=args.pair, models_dirs=args.models_dir)
    except ValueError as e:  # a bad models.yaml or an unknown pair: a message, not a traceback
        parser.error(str(e))
    signal.signal(signal.SIGTERM, stopped)
    app.launch(server_name=args.host, server_port=args.port, share=args.share)


def stopped(signum, frame) -> None:
    """A stop from a service manager, a container or a test (SIGTERM) ends the app as Ctrl+C does: gradio
    closes its server and Python exits normally, so what is removed at exit is removed (the tiny pair's
    checkpoint folders in the temp folder, written for ONNX Runtime). SIGTERM's default kills the process
    with them left behind: two folders a stop."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
