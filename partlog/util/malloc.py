"""Process-wide allocator setting for partlog's own processes.

glibc gives each thread that contends for the heap an arena of its own (up
to 8 per core) and keeps what is freed there for reuse.  A broker's threads
(the group commit's committers, the checkpoint thread, asyncio's workers)
then hold tens of MB of freed memory each: the 10-million-batch memory test
measured 112 MB of private memory with the default and about 40 MB less with
two arenas.  The GIL already serialises most allocations, so fewer arenas
cost no measurable speed here.  ``partlog`` sets this once at start-up;
embedders own their process and decide for themselves (``MALLOC_ARENA_MAX``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt's parameter number for the arena limit (glibc's malloc.h).
_M_ARENA_MAX = -8
MALLOC_ARENAS_MAX = 2


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS_MAX) -> bool:
    """Cap glibc's malloc arenas, unless the environment set
    ``MALLOC_ARENA_MAX`` already; True if the cap is in force.  A no-op
    elsewhere (musl, macOS)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return True
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
