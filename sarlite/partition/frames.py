"""Values by type, as DGL gives them for graphs of several node or edge types.

:class:`TypedData` is a ``g.ndata``-style view over one dict of fields per type
(``view[name]`` is ``{type: tensor}``); :class:`PerType` is a plain ``{type: value}``
that may also be called with the type.
"""
from __future__ import annotations


class PerType(dict):
    """``{type: value}``; ``values(ntype)`` is ``values[ntype]``, so per-type values read
    the same as the methods that took the type (``data.owned_range("paper")``)."""

    def __call__(self, key):
        return self[key]


class TypedData:
    """``ndata``/``edata`` of a heterogeneous graph: ``view[name]`` is ``{type: tensor}``
    over the types whose frame has ``name``; ``view[name] = {type: tensor}`` sets it."""

    def __init__(self, frames: dict):
        self._frames = frames

    def __getitem__(self, name: str) -> dict:
        found = {t: frame[name] for t, frame in self._frames.items() if name in frame}
        if not found:
            raise KeyError(f"no type has the field {name!r}")
        return found

    def __setitem__(self, name: str, value) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"a heterogeneous graph's field {name!r} is set per type: "
                            f"pass {{type: tensor}}, got {type(value).__name__}")
        unknown = [t for t in value if t not in self._frames]
        if unknown:
            raise KeyError(f"unknown types {unknown}; the types are {list(self._frames)}")
        for t, tensor in value.items():
            self._frames[t][name] = tensor

    def __delitem__(self, name: str) -> None:
        self[name]                       # KeyError when no type has it
        for frame in self._frames.values():
            frame.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return any(name in frame for frame in self._frames.values())

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def keys(self) -> list[str]:
        return sorted({name for frame in self._frames.values() for name in frame})

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def items(self):
        return [(name, self[name]) for name in self.keys()]

    def values(self):
        return [self[name] for name in self.keys()]

    def update(self, other: dict) -> None:
        for name, value in other.items():
            self[name] = value
