"""The process runtime under the process group: the settings read from the environment
(``settings``), the launchers' environments (``launchenv``), the run's key (``runkey``),
run health over the rendezvous store (``health``), the allocator setting (``allocator``)
and resident memory (``resident``). Local to the process; nothing here imports
:mod:`sarlite.comm` or runs a collective (a collective step is passed in by the caller,
as :func:`runkey.establish`'s ``agree``)."""
from .settings import RuntimeSettings, read_settings

__all__ = ["RuntimeSettings", "read_settings"]
