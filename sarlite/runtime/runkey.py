"""The run's secret key, and the tags that prove a record or a connection comes from the run.

Two things of sarlite's travel outside the process group: the health records in the
rendezvous store (:mod:`sarlite.runtime.health`) and the one-sided request service
(:mod:`sarlite.kv.service`). Anyone who can reach the store's or a rank's port can
write to them, so both carry a tag made with a key that only the run's processes hold:
an HMAC-SHA256 (:func:`tag`) over the record's fields, or over a fresh challenge for a
connection. The key never travels in the clear on a socket of sarlite's, never touches
disk and never appears on a command line:

* ``sarlite train`` (one host) makes a key and hands it to its workers in their
  environment (:data:`KEY_ENV`, hex); :func:`establish` removes it from
  ``os.environ`` so that the workers' own children do not inherit it. Users of several
  hosts may set the same :data:`KEY_ENV` on every host themselves (e.g. from their
  scheduler's secret store); the launchers' reports of killed workers are then
  authenticated too.
* Otherwise (torchrun, mpirun, srun, several hosts) rank 0 makes the key and broadcasts
  it over the process group, whose connections are only between the run's ranks (the
  collective step is :mod:`sarlite.comm.context`'s, passed to :func:`establish`).

The key lives in this module for the life of the process group (like the group itself):
:func:`establish` sets it, :func:`current` reads it.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Callable, MutableMapping

KEY_ENV = "SARLITE_RUN_KEY"
KEY_BYTES = 32
TAG_CHARS = 32          # hex characters of a tag (128 bits)

_key: bytes | None = None


def new_key() -> bytes:
    """A fresh random key."""
    return secrets.token_bytes(KEY_BYTES)


def parse_key(text: str) -> bytes:
    """The key in ``text`` (hex, as :data:`KEY_ENV` holds it).

    Raises
    ------
    ValueError
        ``text`` is not ``2 * KEY_BYTES`` hex digits (the value itself is not shown).
    """
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"{KEY_ENV} must be {2 * KEY_BYTES} hex digits (e.g. from "
                         f"`python -c 'import secrets; print(secrets.token_hex(32))'`)")
    return key


def tag(key: bytes, *fields) -> str:
    """The HMAC-SHA256 of ``fields`` (joined unambiguously) under ``key``, as
    :data:`TAG_CHARS` hex characters."""
    message = b"\x1f".join(str(f).encode() if not isinstance(f, bytes) else f.hex().encode()
                           for f in fields)
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:TAG_CHARS]


def valid(key: bytes, claimed: str | bytes, *fields) -> bool:
    """Whether ``claimed`` is :func:`tag` of ``fields`` under ``key`` (constant time)."""
    if isinstance(claimed, bytes):
        claimed = claimed.decode("ascii", errors="replace")
    return hmac.compare_digest(claimed, tag(key, *fields))


def current() -> bytes | None:
    """This process's run key, or ``None`` before :func:`establish`. Local."""
    return _key


def establish(environ: MutableMapping[str, str],
              agree: Callable[[bytes | None], bytes] | None = None) -> bytes:
    """Agree on the run's key and keep it (:func:`current`); returns it.

    Takes :data:`KEY_ENV` from ``environ`` (and removes it there) if set, else this
    process makes one. ``agree``, the process group's step (passed by
    :mod:`sarlite.comm.context` when the group has several ranks; **collective**), turns
    the key this process was given, or ``None``, into the key every rank uses (the one
    they were all given, or rank 0's new one). Without ``agree`` it is local.

    Raises
    ------
    ValueError
        :data:`KEY_ENV` is malformed.
    CollectiveError
        From ``agree``: the ranks were given different keys, or only some of them one.
    """
    global _key
    given = environ.pop(KEY_ENV, None)
    key = parse_key(given) if given is not None else None
    if agree is not None:
        key = agree(key)
    _key = key if key is not None else new_key()
    return _key
