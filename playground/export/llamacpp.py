"""llama.cpp: the llama-server command for the run's drafter, its --spec-type and each type's own flags."""

from __future__ import annotations

import shlex

from playground.export.equivalents import difference_comment
from playground.export.settings import CHECKED, ExportSettings


def llamacpp_server(s: ExportSettings) -> str:
    types = s.equivalent.llamacpp
    lines = [f"# {CHECKED['llama.cpp']}"]
    for role, ref in (("target", s.target_ref), ("draft", s.draft_ref)):
        if ref.gguf_repo and ref.gguf and (role == "target" or "draft-simple" in types):
            lines.append(f"# {role}: hf download {ref.gguf_repo} {ref.gguf}")
    spec_type = ["--spec-type", ",".join(types)]
    if "draft-simple" in types:
        spec_type += ["-md", s.draft_ref.gguf_file("draft")]
    groups = [["llama-server", "-m", s.target_ref.gguf_file("target")], spec_type]
    groups += [spec_type_flags(s, t) for t in types]
    # llama.cpp's defaults are top-k 40, top-p 0.95, min-p 0.05: set every one, or p is another p
    groups.append(
        [
            "--temp",
            f"{s.temperature:g}",
            "--top-k",
            str(s.top_k),
            "--top-p",
            f"{s.top_p:g}",
            "--min-p",
            "0",
            "--seed",
            str(s.seed),
        ]
    )
    command = " \\\n  ".join(" ".join(shlex.quote(a) for a in group) for group in groups)
    return "\n".join(lines) + "\n" + difference_comment(s.equivalent, "llama.cpp") + command + "\n"


def spec_type_flags(s: ExportSettings, spec_type: str) -> list[str]:
    """The flags of one --spec-type, each read in common/arg.cpp (a type reads only its own)."""
    if spec_type == "ngram-simple":
        return ["--spec-ngram-simple-size-n", str(s.ngram_max), "--spec-ngram-simple-size-m", str(s.gamma)]
    if spec_type == "ngram-mod":  # n-min 1: any continuation found is drafted (its 48 drops short ones)
        return ["--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", str(s.gamma)]
    n_min, n_max = (s.gamma_min, s.gamma_max) if s.adaptive else (0, s.gamma)
    return ["--spec-draft-n-max", str(n_max), "--spec-draft-n-min", str(n_min),
            "--spec-draft-p-min", f"{s.min_confidence:g}"]
