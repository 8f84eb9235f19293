"""This process's resident memory, read from Linux's ``/proc/self`` (local calls).

The peak (``VmHWM``) can be restarted from the current resident size, so that a peak is
that of one stretch of work: ``engine.memory_budget`` measures a calibration pass and
then bounds training from its start, and the benchmarks measure their timed epochs.
"""
from __future__ import annotations


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def resident_bytes() -> int:
    """This process's resident memory now."""
    return _status_kib("VmRSS") * 1024


def peak_resident_bytes() -> int:
    """This process's peak resident memory since start or the last :func:`reset_peak`."""
    return _status_kib("VmHWM") * 1024


def reset_peak() -> None:
    """Restart the peak from the current resident size (``clear_refs`` 5).

    Raises
    ------
    OSError
        Not on Linux, or the kernel refuses.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError as err:
        raise OSError(f"the peak resident memory is restarted through Linux's "
                      f"/proc/self/clear_refs, which failed here: {err}") from err
