"""The example prompts the tabs offer, in one place: the Race's examples are also the Sweep's
built-in prompts, and the edit prompt is the Step-through's prompt-lookup example too."""

from __future__ import annotations

from playground.config import MODEL, PROMPT_LOOKUP

EDIT_PROMPT = '''Add type hints to this function. Return the whole function, otherwise unchanged.

```python
def moving_average(values, window):
    """Mean of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = sum(values[:window])
    averages.append(total / window)
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / window)
    return averages
```'''

# (label, prompt, drafter, gamma, temperature, max new tokens); the draft model's γ is the default
# pair's (3: its int4 target verifies 4 tokens for little more than 1, 5 cost almost 2)
RACE = [
    ("Code", "Write a Python function is_prime(n) with a short docstring.", MODEL, 3, 0.0, 96),
    ("Chat, sampled", "In three short sentences: why is the sky blue?", MODEL, 3, 0.7, 80),
    ("Code edit: prompt lookup", EDIT_PROMPT, PROMPT_LOOKUP, 8, 0.0, 160),
    (
        "Translation",
        "Translate into French: The small model guesses the next few words; the large model checks "
        "them all at once and keeps the ones it agrees with.",
        MODEL,
        3,
        0.0,
        64,
    ),
]


# (label, prompt, drafter, gamma, temperature)
STEP_THROUGH = [
    (
        "Sampled: see a rejection and its residual",
        "Write a Python function that checks whether a number is prime.",
        MODEL,
        4,
        0.8,
    ),
    (
        "Greedy: accept while the guess is the target's top token",
        "Write a Python function that checks whether a number is prime.",
        MODEL,
        4,
        0.0,
    ),
    ("Prompt lookup: copying from the prompt", EDIT_PROMPT, PROMPT_LOOKUP, 8, 0.0),
]
