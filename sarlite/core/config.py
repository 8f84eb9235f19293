"""Checks of the engine options (mode, pipeline depth), passed per graph."""
from __future__ import annotations

MODES = ("sar", "sa", "one-shot")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    return mode


def check_depth(depth: int) -> int:
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"pipeline_depth must be a non-negative integer, got {depth!r}")
    return depth
