"""`python -m playground.serve`: served engines from the command line.

  python -m playground.serve setup vllm [--venv DIR] [--force]   create vLLM's own venv
  python -m playground.serve setup llamacpp                       build llama-cpp-python into this python
  python -m playground.serve setup llama-server [--force]         build llama.cpp's llama-server (cached)
  python -m playground.serve setup openvino [--pair NAME]         install OpenVINO GenAI (and write a pair's IR)
  python -m playground.serve status                               where each is, whether it is ready
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playground.serve import llama_server, vllm_venv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m playground.serve", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    setup = sub.add_parser("setup", help="create a served engine's environment")
    setup.add_argument("engine", choices=["vllm", "llamacpp", "llama-server", "openvino"])
    setup.add_argument("--venv", type=Path, default=None, help="where (default: <cache>/vllm-venv)")
    setup.add_argument("--force", action="store_true", help="make it anew even if it is ready")
    setup.add_argument("--pair", default=None, help="openvino: also write this pair's IR now (default: on first use)")
    sub.add_parser("status", help="where vLLM's environment and llama-server are and whether they are ready")
    args = ap.parse_args(argv)
    if args.cmd == "setup":
        try:
            if args.engine == "llamacpp":
                from playground.serve.llamacpp_extra import setup_llamacpp

                setup_llamacpp()
                return 0
            if args.engine == "openvino":
                from playground.serve.openvino_setup import setup_openvino

                setup_openvino(args.pair)
                return 0
            if args.engine == "llama-server":
                llama_server.setup_llama_server(force=args.force)
                return 0
            vllm_venv.setup_vllm(args.venv, force=args.force)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    venv = vllm_venv.default_venv()
    print(f"vLLM venv: {venv} ({'ready' if vllm_venv.is_ready(venv) else 'not set up'})")
    print(llama_server.status())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
