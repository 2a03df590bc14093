"""One place that turns a failing command into one line on stderr.

Both command lines (``partlog`` and ``walmgr``) run their subcommand through
:func:`run_cli`.  A failure prints ``<prog>: <what and where>`` and exits
with 2 for usage and configuration errors (something in the invocation, a
config file, a port or a path cannot work as given) and 1 for runtime
failures (a store or a controller that fails while running).  No traceback,
unless ``--debug`` was given: then the exception propagates as it is.

An exception says which it is with an integer ``exit_status`` attribute
(``ClusterMismatchError``, ``TlsConfigError``, ``SecretFileError``, ...);
the table below covers the standard ones.  Anything unforeseen is a bug:
it still gets one line, naming its type, and exit status 1.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_RUNTIME = 1
EXIT_USAGE = 2
# The longest line an error may print: a message that quotes a whole
# payload must not flood a terminal or a log.
ERROR_LINE_CHARS_MAX = 2000
# OSErrors that mean "the invocation names something that cannot work".
_USAGE_ERRNOS = frozenset(
    {
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.EROFS,
        errno.ENAMETOOLONG,
    }
)


def take_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` (accepted anywhere on the line), and whether it was there."""
    return [a for a in argv if a != "--debug"], "--debug" in argv


def exit_status(e: BaseException) -> int:
    status = getattr(e, "exit_status", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    if isinstance(e, OSError) and e.errno in _USAGE_ERRNOS:
        return EXIT_USAGE
    if isinstance(e, UnicodeDecodeError):
        return EXIT_USAGE  # a config or secret file that is not text
    return EXIT_RUNTIME


def one_line(e: BaseException) -> str:
    """The message of ``e`` as one line: what went wrong and where."""
    if isinstance(e, OSError) and e.strerror:
        # "[Errno 98] error while attempting to bind on address ...": drop the
        # errno prefix, keep asyncio's or the OS's words and the file name.
        text = str(e).replace(f"[Errno {e.errno}] ", "")
        if e.filename is not None and str(e.filename) not in text:
            text = f"{e.filename}: {text}"
    else:
        text = str(e) or type(e).__name__
    # Builtin exceptions other than these are bugs (KeyError, TypeError,
    # AssertionError, ...): their type is the most useful word.  Ours and
    # the libraries' carry messages that name what and where.
    expected = OSError | ValueError | RuntimeError | TimeoutError
    if (type(e).__module__ == "builtins" and not isinstance(e, expected)) or not str(e):
        text = f"{type(e).__name__}: {text}"
    text = " ".join(text.split())  # one line, whatever the message held
    return text[:ERROR_LINE_CHARS_MAX]


def run_cli(prog: str, fn: Callable[[], int], *, debug: bool) -> int:
    """Run ``fn`` (a subcommand); its exit status, or one line and 1 or 2."""
    try:
        return fn()
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as e:
        if debug:
            raise
        print(f"{prog}: {one_line(e)}", file=sys.stderr)
        return exit_status(e)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and the
    flag (exit status 2), not the whole usage text; ``--help`` has that."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")
