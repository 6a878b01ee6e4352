import os
import socket
import tempfile

import pytest

from playground.models.tiny import tiny_model, tiny_pair


def pytest_configure(config):
    """No test reads the pairs this machine's user kept (user-pairs.yaml in their cache): the registry's
    contents are what models.yaml says, wherever the suite runs. A test that keeps pairs points the file
    at a machine of its own (tests/stores.py)."""
    os.environ.setdefault("PLAYGROUND_USER_PAIRS", os.path.join(tempfile.mkdtemp(prefix="user-pairs-"), "user-pairs.yaml"))


@pytest.fixture(autouse=True)
def kept_curves(tmp_path_factory, monkeypatch):
    """No test reads or writes the v(k) curves this machine kept (measure/bench/curve_store.py): each
    test's are its own, so a curve one test measured never turns another's estimate from assumed to
    measured."""
    path = tmp_path_factory.mktemp("curves") / "verify_curves.json"
    monkeypatch.setenv("PLAYGROUND_VERIFY_CURVES", str(path))
    return path


@pytest.fixture(scope="session")
def pair():
    """(target, draft, tokenizer): a 4-layer random Qwen2 and its 1-layer early-exit draft."""
    return tiny_pair(seed=0)


@pytest.fixture(scope="session")
def small_vocab_pair():
    """Two independent random models over 8 tokens: q differs a lot from p, so every branch of
    Algorithm 1 fires often and a wrong rule shows up in a few thousand draws."""
    return tiny_model(8, 2, seed=11, logit_scale=0.25), tiny_model(8, 1, seed=12, logit_scale=0.25)


@pytest.fixture
def flipped_verification():
    """flipped_verification(model): from then until the test ends, the model's forwards over 2 to 8 new
    tokens (a verification's) round the other way at every row, their top two logits swapped, as a
    bf16 or int4 forward over several rows can at a near-tie; one-token steps and a prompt's forward
    (longer) are left alone. A greedy speculative run then leaves the plain one where the two tokens
    are those of a one-token step."""
    import torch

    hooks = []

    def swap(module, args, kwargs, output):
        ids = kwargs.get("input_ids")
        if ids is not None and 1 < ids.shape[1] <= 8:
            with torch.no_grad():
                top = output.logits.topk(2, dim=-1)
                output.logits.scatter_(-1, top.indices, top.values.flip(-1))
        return output

    def flip(model):
        hooks.append(model.register_forward_hook(swap, with_kwargs=True))
        return model

    yield flip
    for hook in hooks:
        hook.remove()


# -- browser tests: the app on a free port, Debian's Chromium, one page per test ----------------


@pytest.fixture(scope="module")
def url():
    from browser import PAIR

    from playground.app.demo import build_demo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = build_demo(default_pair=PAIR)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        from browser import ARGS, CHROMIUM

        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(url)
    page.get_by_role("button", name="Run the race").wait_for(timeout=60_000)
    yield page
    assert not dialogs, f"a script ran from the page's content: {dialogs}"
    page.close()


@pytest.fixture(scope="module")
def tab_view():
    """tab_view(tab, part="view") -> (ctx, components): an app tab (its app/<tab>/tab.py module) built
    once on a fresh app context, and the part of what its build returns that a test drives ("view",
    or the Theory tab's "runners"): the components its handlers' dicts are keyed by. One context per
    test module, shared by the tabs that module builds: its measured curves and points are its own."""
    import gradio as gr

    from playground.app.shared.context import build_context

    ctx, built = build_context(), {}

    def view(tab, part: str = "view"):
        if tab not in built:
            with gr.Blocks():
                built[tab] = tab.build(ctx)
        return ctx, built[tab][part]

    return view


@pytest.fixture(scope="module")
def race_tab(tab_view):
    """(ctx, view): the race tab on its module's context, frames as fast as they come."""
    from playground.app.race import tab as tab_race

    ctx, view = tab_view(tab_race)
    ctx.frame_every = 0.0
    return ctx, view


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one torch thread: on a busy machine a second intra-op thread mostly
    spins (a joint draw of the tiny pair took about 50 ms of CPU on two threads, 4 ms on one).
    A module asks for it with `pytestmark = pytest.mark.usefixtures("one_thread")`; restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
