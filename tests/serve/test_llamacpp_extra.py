"""The optional llama.cpp extra's build flags (serve/llamacpp_extra.py): chosen from the
CPU, AMX never compiled in (it died with "Illegal instruction" on this project's VMs)."""

from playground.serve.llamacpp_extra import cmake_args
from playground.serve.__main__ import main


def test_a_cpu_with_amx_gets_avx512_spelled_out_and_no_amx():
    args = cmake_args({"avx512f", "avx512_vnni", "amx_tile", "amx_int8"})
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX512=ON" in args
    assert not any("AMX" in a for a in args)


def test_a_cpu_without_amx_gets_native_code():
    assert cmake_args({"avx2", "fma"})[0] == "-DGGML_NATIVE=ON"
    assert cmake_args(set())[0] == "-DGGML_NATIVE=ON"


def test_the_setup_command_offers_llamacpp(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["setup", "--help"])
    assert "llamacpp" in capsys.readouterr().out
