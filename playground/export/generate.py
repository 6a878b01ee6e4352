"""transformers: generate() with assistant_model, prompt lookup or assistant_early_exit for the run's drafter."""

from __future__ import annotations

from dataclasses import dataclass

from playground.export.equivalents import ASSISTANT, LOOKUP, difference_comment
from playground.export.settings import CHECKED, EXAMPLE_MESSAGE, ExportSettings


@dataclass(frozen=True)
class Snippet:
    setup: str  # loads the models (downloads)
    run: str  # configures and generates, given `target`, `draft`, `tokenizer` (and `torch` when sampling)

    @property
    def code(self) -> str:
        return self.setup + "\n" + self.run


def transformers_snippet(s: ExportSettings) -> Snippet:
    mode = s.equivalent.transformers
    setup = (
        f"# {CHECKED['transformers']}\n"
        + difference_comment(s.equivalent, "transformers")
        + ("" if s.greedy else "import torch\n")
        + "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({s.target_ref.checkpoint('target')!r})\n"
        f"target = AutoModelForCausalLM.from_pretrained({s.target_ref.checkpoint('target')!r})\n"
        + (
            f"draft = AutoModelForCausalLM.from_pretrained({s.draft_ref.checkpoint('draft')!r})\n"
            if mode == ASSISTANT
            else ""
        )
    )
    run = []
    if mode == LOOKUP:
        speculation = f"prompt_lookup_num_tokens={s.gamma}, max_matching_ngram_size={s.ngram_max}"
    else:
        # early exit drafts with the target itself: the target is then the assistant whose config is read
        assistant = "draft" if mode == ASSISTANT else "target"
        # "heuristic" would carry the grown length into the next generate() call; "_transient" starts
        # every call from γ again, as each run here does.
        schedule = "heuristic_transient" if s.adaptive else "constant"
        run.append(
            "# The draft length is read from the assistant's generation_config, not from generate()'s\n"
            + ("# arguments.\n" if mode == ASSISTANT
               else "# arguments; with early exit the assistant is the target.\n")
            + f"{assistant}.generation_config.num_assistant_tokens = {s.gamma}\n"
            f'{assistant}.generation_config.num_assistant_tokens_schedule = "{schedule}"'
            + ("  # +2 after a fully accepted draft, -1 after a rejection\n" if s.adaptive else "\n")
            + f"{assistant}.generation_config.assistant_confidence_threshold = {float(s.min_confidence)!r}"
            + (
                "  # 0: never stop drafting early\n"
                if not s.min_confidence
                else "  # adapted during generation when scikit-learn is installed\n"
            )
        )
        if mode == ASSISTANT:
            speculation = "assistant_model=draft"
        else:
            if not s.kept_layers:
                run.append("# kept_layers 0: half the target's layers, as the playground's self-drafter "
                           "takes it\n")
            speculation = f"assistant_early_exit={early_exit_layers(s)}"  # the first N layers draft
    sampling = (
        "do_sample=False"
        if s.greedy
        else f"do_sample=True, temperature={float(s.temperature)!r}, top_k={s.top_k}, "
        f"top_p={float(s.top_p)!r}"
    )
    run.append(
        f'\nmessages = [{{"role": "user", "content": {EXAMPLE_MESSAGE!r}}}]\n'
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",\n'
        "                                       return_dict=True)\n"
        + ("" if s.greedy else f"torch.manual_seed({s.seed})  # generate() samples from the global RNG\n")
        + f"output = target.generate(**inputs, {speculation}, max_new_tokens={s.max_new_tokens},\n"
        f"                         {sampling}, repetition_penalty=1.0)\n"
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))\n'
    )
    return Snippet(setup, "".join(run))


def early_exit_layers(s: ExportSettings) -> str:
    """kept_layers in the snippet: 0 is half the target's layers, as the self-drafter takes it
    (max(1, total // 2)), read off the loaded model since the registry records no layer counts."""
    return str(s.kept_layers) if s.kept_layers else "max(1, target.config.num_hidden_layers // 2)"
