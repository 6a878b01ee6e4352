"""Messages that reach the page or the API never name server-side absolute paths: the shipped
models.yaml is "models.yaml", and a failing local source is named by its file name."""

import html
import textwrap

import gradio as gr
import pytest

from playground.models.pair_cache import PairCache
from playground.models.registry import DEFAULT_CONFIG, load_registry
from playground.app.shared.context import AppContext
from playground.app.shared.flow import public
from playground.config import RunConfig
from playground.app.race import tab as tab_race


def test_unknown_pair_in_the_shipped_registry_names_models_yaml_not_where_it_lies():
    with pytest.raises(ValueError) as error:
        load_registry().pair("nope")
    assert str(error.value).startswith("models.yaml: unknown pair 'nope'; known pairs:")
    assert str(DEFAULT_CONFIG.parent) not in str(error.value)


def test_a_config_the_user_named_is_named_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("default_pair: x\nmodels: {}\npairs: {}\n")
    with pytest.raises(ValueError, match=r"^mine\.yaml: models: expected a non-empty mapping"):
        load_registry("mine.yaml")


@pytest.mark.parametrize("message, shown", [
    ("  - local:/srv/app/models/big: /srv/app/models/big does not exist", "  - local:big: big does not exist"),
    ("cannot write ~/.cache/speculative-playground/checkpoints/m-1/x.json", "cannot write x.json"),
    ("the hub (https://huggingface.co/api) is unreachable", "the hub (https://huggingface.co/api) is unreachable"),
    ("top-p must be in (0, 1], got 1/2", "top-p must be in (0, 1], got 1/2"),
])
def test_public_reduces_absolute_paths_to_file_names(message, shown):
    assert public(message) == shown


def test_a_failing_local_source_reaches_the_page_without_server_paths(tmp_path):
    secret = tmp_path / "server-side" / "weights"
    config = tmp_path / "models.yaml"
    config.write_text(textwrap.dedent(f"""
        default_pair: lost
        models:
          gone: {{sources: [{{local: {secret}}}], dtype: float32}}
          d: {{sources: [{{tiny: draft}}], dtype: float32}}
        pairs:
          lost: {{target: gone, draft: d, description: a target that is not there}}
    """))
    registry = load_registry(config)
    ctx = AppContext(registry, PairCache(registry))
    values = {**{n: getattr(RunConfig(pair="lost"), n) for n in RunConfig.names()}, "max_new_tokens": 4}
    with gr.Blocks():
        view = tab_race.build(ctx)["view"]  # the handler's dicts are keyed by its components
    outputs = []
    with pytest.raises(gr.Error) as raised:
        for o in tab_race.handle(ctx, view, tab_race.RaceForm("hello", "", values)):
            outputs.append(o)
    shown = raised.value.message + html.unescape(outputs[-1][view.status])
    assert "Could not load pair 'lost'" in shown and "weights does not exist" in shown
    assert str(tmp_path) not in shown and "server-side" not in shown
