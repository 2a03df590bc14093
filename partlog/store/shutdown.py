"""Whether a store's previous run may have lost acknowledged writes (KIP-966's
unclean shutdown, docs/design/elr.md).

A process crash loses nothing: the OS keeps what LMDB and the journal
wrote.  Only a machine crash or power loss can, and only with ``sync=False``
(a write is then acknowledged before it is on disk).  So a store reports an
unclean shutdown when all of these hold:

* its previous run ran with ``sync=False`` (a ``sync=True`` run's
  acknowledged writes were on disk: never unclean);
* that run did not close cleanly: the marker it wrote (and fsynced) at
  open is still there; a clean close removes it only after a checkpoint
  and an LMDB sync put everything on disk;
* the machine rebooted since: the boot id the run recorded differs from
  the current one, or either is unknown (None: every unclean close counts,
  Kafka's rule).

The boot id is handed in (the CLI reads ``/proc/sys/kernel/random/boot_id``,
the simulation counts each machine's power losses); nothing here reads a
global.  The marker is ``MARKER_FILE`` in the store's directory, a small
JSON map written to a temporary file, fsynced, renamed and the directory
fsynced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

log = logging.getLogger(__name__)

__all__ = ["BOOT_ID_CHARS_MAX", "BOOT_ID_PATH", "MARKER_FILE", "closed_cleanly", "opened", "read_boot_id"]

MARKER_FILE = "running.json"
# A boot id is a UUID (36 characters); a marker beyond this is not ours.
BOOT_ID_CHARS_MAX = 128
_MARKER_BYTES_MAX = 1_024


def opened(path: str, *, sync: bool, boot_id: str | None) -> bool:
    """Record this run's marker in directory ``path`` (a store opened for
    writing) and return whether the previous run shut down uncleanly, by
    the rules in the module doc.  A marker that does not parse counts as an
    unclean ``sync=False`` run's, with no boot id."""
    if boot_id is not None and not 0 < len(boot_id) <= BOOT_ID_CHARS_MAX:
        raise ValueError(f"boot_id must be 1-{BOOT_ID_CHARS_MAX} characters, got {boot_id!r:.200}")
    marker = os.path.join(path, MARKER_FILE)
    unclean = False
    try:
        with open(marker, "rb") as f:
            raw = f.read(_MARKER_BYTES_MAX + 1)
    except FileNotFoundError:
        pass
    else:
        previous = _parse(raw)
        was_synced = previous.get("sync") is True
        was_boot = previous.get("boot_id")
        lost_before = previous.get("lost") is True  # the run before it was unclean, and it did not close cleanly
        unclean = lost_before or (
            not was_synced and (boot_id is None or not isinstance(was_boot, str) or was_boot != boot_id)
        )
        if unclean:
            log.warning("unclean shutdown: the previous run may have lost acknowledged writes path=%s", path)
    # "lost" keeps the verdict until a clean close: a crash before this run
    # reported it must not turn it into a clean shutdown.
    os.makedirs(path, exist_ok=True)
    _write(path, marker, json.dumps({"boot_id": boot_id, "sync": sync, "lost": unclean}).encode())
    return unclean


def closed_cleanly(path: str) -> None:
    """The store closed with everything on disk: remove the marker (and
    make the removal durable)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(path, MARKER_FILE))
    _fsync_dir(path)


def _parse(raw: bytes) -> dict[str, object]:
    if len(raw) > _MARKER_BYTES_MAX:
        return {}
    try:
        v = json.loads(raw)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _write(path: str, marker: str, data: bytes) -> None:
    tmp = marker + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, marker)
    _fsync_dir(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Linux's id of this boot: a store's unclean-shutdown rule compares it with
# its previous run's.
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """This machine's boot id, for the shells (the broker CLI, ``partlog
    cluster``), or None where it cannot be read (then every unclean close
    counts as an unclean shutdown, Kafka's rule)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(200).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if 0 < len(text) <= BOOT_ID_CHARS_MAX else None
