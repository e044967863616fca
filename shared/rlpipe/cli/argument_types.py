"""Argument types for numbers of seconds: argparse's ``float`` takes ``-5``, ``nan`` and ``inf``,
and a command went on with them (``plan --step-seconds -5`` printed negative chip-hours and exited
0). These refuse them where argparse refuses a malformed number: a usage error (exit 2) that names
the option and what it takes.
"""

from __future__ import annotations

import argparse
import math


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value


def positive_seconds(text: str) -> float:
    """More than zero seconds (a duration that must pass: a step, a timeout, a budget)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 seconds")
    return value


def seconds(text: str) -> float:
    """Zero seconds or more (0 means: do not wait)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 seconds or more")
    return value
