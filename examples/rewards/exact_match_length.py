"""Reward functions for examples/gemma4-26b-v6e-32-custom-reward.yaml.

MaxText 0.2.4 calls each one with keyword arguments only: ``prompts``, ``completions``,
``tmvp_config``, ``mode`` and the processed example's other keys (with the built-in processor,
``question`` and ``answer``, the answer a JSON list of acceptable answers). Each returns one float
per completion. Together they replace MaxText's built-in three.
"""

import json
import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def exact_match(prompts, completions, answer, **kwargs):
    """1.0 when the text between <answer> tags is one of the acceptable answers, else 0.0."""
    scores = []
    for completion, accepted in zip(completions, answer, strict=True):
        found = _ANSWER.search(completion)
        options = {str(a).strip() for a in json.loads(accepted)}
        scores.append(1.0 if found and found.group(1).strip() in options else 0.0)
    return scores


def length_penalty(prompts, completions, **kwargs):
    """A small cost per character past 400, so the policy does not learn to ramble."""
    return [-0.001 * max(0, len(completion) - 400) for completion in completions]
