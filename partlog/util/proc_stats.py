"""The process's own counters from /proc, for benchmarks that measure
memory or I/O.  Each returns 0 where /proc is missing (not Linux)."""

from __future__ import annotations


def _status_kib(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss_anon_bytes() -> int:
    """Private resident memory (RssAnon from /proc/self/status), in bytes."""
    return _status_kib("RssAnon")


def rss_bytes() -> int:
    """All resident memory (VmRSS), file-backed pages such as LMDB's map
    included, in bytes."""
    return _status_kib("VmRSS")


def io_counter(field: str) -> int:
    """One counter of /proc/self/io (``wchar``, ``write_bytes``, ...)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
