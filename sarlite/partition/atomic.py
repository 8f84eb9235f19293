"""Writing a file atomically: under a temporary name, renamed into place, with one error
for a full disk, and the removal of temporaries that killed processes left.

The project's one atomic writer (partition files, their check records, checkpoints, the
training outputs); :mod:`sarlite.partition.files` and :mod:`sarlite.partition.integrity`
both write through it, so it imports neither.
"""
from __future__ import annotations

import errno
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from dgl._ffi.base import DGLError

# torch.save and DGL's C++ writers report a full disk as one of these, without errno
_WRITER_ERRORS = (RuntimeError, DGLError)
# after such an error, a file system with less than this available counts as full
FULL_BELOW = 16 << 20
_TEMPORARY = re.compile(r".\.tmp-([0-9]+)$")


def no_space_error(path: str | os.PathLike) -> OSError:
    """The one error sarlite raises for a full disk: errno ``ENOSPC``, naming ``path``."""
    return OSError(errno.ENOSPC, f"no space left on device while writing {path}")


def _disk_full(err: Exception, directory: str) -> bool:
    """Whether ``err``, raised by a writer in ``directory``, means the disk is full."""
    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    if not isinstance(err, _WRITER_ERRORS):
        return False
    try:
        stats = os.statvfs(directory)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BELOW


def _drop_frames(err: BaseException | None) -> None:
    """Detach the tracebacks of ``err`` and the errors it chains: their frames may hold a
    writer whose open file keeps a deleted temporary file's space in use."""
    while err is not None and err.__traceback__ is not None:
        err.__traceback__ = None
        err = err.__cause__ or err.__context__


def _full_disk_error(err: Exception, path: str | os.PathLike) -> OSError | None:
    """:func:`no_space_error` for ``path`` if ``err`` means the disk is full (``err``'s
    frames then detached), else ``None``."""
    if not _disk_full(err, os.path.dirname(os.path.abspath(path))):
        return None
    _drop_frames(err)
    return no_space_error(path)


@contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk met while writing ``path`` in the block into :func:`no_space_error`
    (chained to the writer's own error, without its frames).

    Raises
    ------
    OSError
        errno ``ENOSPC``, "no space left on device while writing <path>".
    """
    try:
        yield
    except Exception as err:
        full = _full_disk_error(err, path)
        if full is None:
            raise
        raise full from err


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` and rename the result to ``path`` (atomic on POSIX).

    The temporary file is ``<path>.tmp-<pid>``; it is removed when ``write`` fails (one a
    killed process leaves is removed by :func:`remove_stale_temporaries`).

    Raises
    ------
    OSError
        errno ``ENOSPC`` with the message "no space left on device while writing <path>"
        when the disk is full, whatever error the writer (Python, torch or DGL) raised;
        other errors pass unchanged.
    """
    path = str(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except Exception as err:
        # not naming_full_disk: contextlib's __exit__ frame would keep the writer's frames,
        # and with them its open file, whose space the removal below must free
        full = _full_disk_error(err, path)
        if full is None:
            raise
        raise full from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:             # it exists, as another user's process
        return True
    except (OverflowError, ValueError):  # not a possible pid
        return False
    return True


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write` that killed processes left.

    Looks in ``directory`` and its ``part*/`` subdirectories (a partition's layout) for
    files ``<name>.tmp-<pid>`` whose process no longer exists. A pid means something on
    this machine only: a directory that a process on another machine is writing into at
    the same moment must not be cleaned from here.

    Returns
    -------
    list[Path]
        The removed files (none when ``directory`` does not exist).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for path in sorted([*directory.glob("*.tmp-*"), *directory.glob("part*/*.tmp-*")]):
        match = _TEMPORARY.search(path.name)
        if match and path.is_file() and not _running(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def write_json(path: str | os.PathLike, obj: dict) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=4)
    atomic_write(path, write)
