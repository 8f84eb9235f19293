"""IntelLabs SAR's ``logging_setup``: one handler, with the rank in every line, for the
messages of sarlite (including ``sarlite.sar``)."""
from __future__ import annotations

import logging

logger = logging.getLogger("sarlite.sar")


def logging_setup(log_level: int, _rank: int = -1, _world_size: int = -1,
                  log_file: str | None = None) -> None:
    """Send sarlite's log records of ``log_level`` and above to stderr (or ``log_file``,
    overwritten), each line starting with ``"<rank + 1> / <world size>"`` as in SAR."""
    handler = logging.FileHandler(log_file, "w") if log_file else logging.StreamHandler()
    handler.setFormatter(logging.Formatter(
        f"{_rank + 1} / {_world_size} - %(name)s - %(levelname)s - %(message)s"))
    handler.setLevel(log_level)
    root = logging.getLogger("sarlite")
    root.setLevel(log_level)
    root.addHandler(handler)


__all__ = ["logger", "logging_setup"]
