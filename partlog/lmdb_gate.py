"""Who is inside an LMDB environment of this process, and the three moments
that need nobody there.

py-lmdb has sharp edges that every LMDB user in this project meets (the
metadata store, walmgr's registry):

* **Growing the map** (``set_mapsize``) needs no live transaction in this
  process.
* **Aborting a write transaction** waits, from py-lmdb 2.0, for a moment with
  no reader in this process; under steady read load it never comes
  (``partlog.store``'s test_aborted_write_under_read_load_does_not_hang).
* **Closing the environment** under a live transaction crashes the process
  in the C extension; an asyncio shell's worker threads outlive the tasks
  that started them, so close must wait for them.

:class:`LmdbGate` counts readers and writes in flight; ``readers_drained``
holds off new readers until the open ones end (for the first two);
``close`` refuses new operations and waits for all (for the third).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class LmdbGate:
    """See the module doc.  ``closed_error()`` builds the exception an
    operation gets once the environment is closing (it names the store)."""

    def __init__(self, closed_error: Callable[[], Exception]) -> None:
        self._cond = threading.Condition()
        self._closed_error = closed_error
        self.readers = 0
        self.writers = 0
        self.draining = False
        self.closed = False

    def enter_read(self) -> None:
        with self._cond:
            if self.closed:
                raise self._closed_error()
            while self.draining:
                self._cond.wait()
            self.readers += 1

    def exit_read(self) -> None:
        with self._cond:
            self.readers -= 1
            self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Count a write in flight (``close`` waits for it)."""
        with self._cond:
            if self.closed:
                raise self._closed_error()
            self.writers += 1
        try:
            yield
        finally:
            with self._cond:
                self.writers -= 1
                self._cond.notify_all()

    @contextmanager
    def readers_drained(self) -> Iterator[None]:
        """Hold off new read transactions of this process and wait until the
        open ones end (map growth, aborting a write transaction)."""
        with self._cond:
            self.draining = True
            try:
                while self.readers:
                    self._cond.wait()
                yield
            finally:
                self.draining = False
                self._cond.notify_all()

    def close(self) -> bool:
        """Refuse new operations and wait for the ones in flight; False if
        it was closed already.  The caller closes the environment after."""
        with self._cond:
            if self.closed:
                return False
            self.closed = True
            while self.readers or self.writers:
                self._cond.wait()
            return True
