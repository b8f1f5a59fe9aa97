"""The types of command-line flags (argparse ``type=`` callables): a bad value raises
argparse.ArgumentTypeError naming itself and what is allowed, which the parser turns into a
one-paragraph ConfigError.

They live in core/, not options/, so plugins (models/, envs/, agents/) and core modules can
declare flags without importing the command-line machinery.
"""
import argparse
import math
from typing import List, Optional, Union


def _number(kind, low, text, allow_none=False):
    if allow_none and str(text).lower() in ("none", "null", ""):
        return None
    try:
        value = float(text)
        if kind is int:  # 1e6 and 1_000_000 are integers too
            if not value.is_integer():
                raise ValueError
            value = int(value)
    except (TypeError, ValueError, OverflowError):
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if kind is float and math.isnan(value):
        raise argparse.ArgumentTypeError("nan is not allowed")
    if low is not None and value < low:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= {low}")
    return value


def non_negative_int(text) -> int:
    return _number(int, 0, text)


def positive_int(text) -> int:
    return _number(int, 1, text)


def positive_float(text) -> float:
    value = _number(float, 0, text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def non_negative_float(text) -> float:
    return _number(float, 0, text)


def positive_float_or_none(text) -> Optional[float]:
    return None if str(text).lower() in ("none", "null", "") else positive_float(text)


def unit_interval(text) -> float:
    """A number in [0, 1]: a discount, a lambda, a probability, a Polyak rate."""
    value = _number(float, 0, text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def unit_interval_or_none(text) -> Optional[float]:
    return None if str(text).lower() in ("none", "null", "") else unit_interval(text)


def positive_int_or_none(text) -> Optional[int]:
    return _number(int, 1, text, allow_none=True)


def target_return(text) -> Union[float, str, None]:
    """A number; 'auto' (the env's reward_threshold, if any); or 'none' (never stop early)."""
    if str(text).lower() == "auto":
        return "auto"
    return _number(float, None, text, allow_none=True)


def auto_or_positive_int(text) -> Union[int, str]:
    if str(text).lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither 'auto' nor an integer >= 1") from None


def auto_or_nonnegative_int(text) -> Union[int, str]:
    if str(text).lower() == "auto":
        return "auto"
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither 'auto' nor an integer >= 0") from None


def gpu_list(text) -> List[int]:
    ids = [s.strip() for s in str(text).split(",") if s.strip()]
    if not all(s.isdigit() for s in ids):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of GPU ids "
                                         f"such as 0,1")
    return [int(s) for s in ids]


def checked_text(check):
    """A flag type that keeps the text as given (configs are plain data) after ``check(text)``
    accepts it: a ValueError from the check (a ConfigError is one) becomes the
    ArgumentTypeError argparse shows in its own words, not as "invalid value"."""
    def parse(text):
        try:
            check(text)
        except argparse.ArgumentTypeError:
            raise
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    parse.__name__ = getattr(check, "__name__", "text")
    return parse
