"""Building llama.cpp's llama-server (serve/llama_server.py) without building it: the flags chosen
from the CPU as the extra chooses them, the cache key per flag set, a half-made build never
trusted, PATH before the cache, and a missing binary named with the command that builds it. The
real server is tested in tests/measure/bench/test_served_llamacpp.py."""

import os

import pytest

from playground.measure.bench.served import launch
from playground.measure.bench.served.client import ServedError
from playground.serve import llama_server
from playground.serve.__main__ import main


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """No llama-server on PATH and an empty build cache."""
    monkeypatch.setenv("PLAYGROUND_LLAMA_SERVER_DIR", str(tmp_path / "built"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path


def executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_server_build_takes_the_extras_cpu_flags_and_turns_the_server_on():
    amx = llama_server.server_cmake_args({"avx512f", "amx_tile", "amx_int8"})
    assert "-DGGML_NATIVE=OFF" in amx and "-DGGML_AVX512=ON" in amx and not any("AMX" in a for a in amx)
    native = llama_server.server_cmake_args({"avx2"})
    assert native[0] == "-DGGML_NATIVE=ON"
    for args in (amx, native):
        assert {"-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_CURL=OFF",
                "-DBUILD_SHARED_LIBS=OFF"} <= set(args)
        assert "-DLLAMA_BUILD_SERVER=OFF" not in args and "-DLLAMA_BUILD_TOOLS=OFF" not in args
    assert llama_server.build_key(amx) != llama_server.build_key(native)


def test_a_build_without_its_marker_is_never_trusted(empty_cache):
    where = llama_server.build_dir()
    executable(where / llama_server.BINARY)
    assert llama_server.built_binary() is None and llama_server.find_binary() is None
    (where / llama_server.MARKER).write_text("done\n")
    assert llama_server.built_binary() == where / llama_server.BINARY
    assert llama_server.find_binary() == str(where / llama_server.BINARY)


def test_setup_with_a_whole_build_builds_nothing(empty_cache):
    where = llama_server.build_dir()
    executable(where / llama_server.BINARY)
    (where / llama_server.MARKER).write_text("done\n")
    said = []
    assert llama_server.setup_llama_server(say=said.append) == where / llama_server.BINARY
    assert said == [f"[setup llama-server] ready: {where / llama_server.BINARY}"]


def test_llama_server_on_path_comes_before_the_built_one(empty_cache):
    where = llama_server.build_dir()
    executable(where / llama_server.BINARY)
    (where / llama_server.MARKER).write_text("done\n")
    own = executable(empty_cache / "bin" / "llama-server")
    assert llama_server.find_binary() == str(own) == launch.llama_server_binary()


def test_a_missing_binary_names_the_command_that_builds_it(empty_cache):
    assert launch.llama_server_binary() is None
    with pytest.raises(ServedError, match=r"llama-server is neither on PATH nor built: run `python -m "
                                          r"playground.serve setup llama-server`"):
        launch.start_llamacpp(["-m", "model.gguf"])
    assert "not built (python -m playground.serve setup llama-server" in llama_server.status()


def test_setup_without_cmake_says_what_it_needs(empty_cache):
    with pytest.raises(RuntimeError, match="cmake is not on PATH"):
        llama_server.setup_llama_server(say=lambda _: None)
    assert not os.path.exists(llama_server.build_dir())


def test_the_setup_command_offers_llama_server_and_status_names_it(empty_cache, capsys):
    with pytest.raises(SystemExit):
        main(["setup", "--help"])
    assert "llama-server" in capsys.readouterr().out
    main(["status"])
    assert "llama-server: not built" in capsys.readouterr().out


def test_the_exported_command_is_read_back_as_llama_servers_arguments():
    text = ("# a comment\nllama-server -m 'a b.gguf' \\\n"
            "  --spec-type draft-simple -md d.gguf \\\n  --seed 0\n")
    assert launch.llamacpp_args_of(text) == ["-m", "a b.gguf", "--spec-type", "draft-simple", "-md", "d.gguf",
                                             "--seed", "0"]
    with pytest.raises(ServedError, match="not a `llama-server"):
        launch.llamacpp_args_of("vllm serve x\n")
