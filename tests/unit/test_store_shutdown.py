"""A store's unclean-shutdown verdict (partlog.store.shutdown, KIP-966) on
real LMDB stores: clean closes, process crashes (a close without the
checkpoint, as the simulation's), power losses (the boot id changed), with
sync on and off, an unknown boot id, and a verdict kept across a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.store import MetadataStore
from partlog.store.shutdown import MARKER_FILE, closed_cleanly, opened, read_boot_id


def run(path: Path, *, boot: str | None, sync: bool = False, clean: bool) -> bool:
    """One run of a store: open, close cleanly or crash; its verdict."""
    store = MetadataStore.open(path, sync=sync, checkpoint_thread=False, boot_id=boot)
    verdict = store.unclean_shutdown
    store.close(checkpoint=clean)
    return verdict


def test_a_new_store_and_clean_closes_are_clean(tmp_path: Path) -> None:
    assert not run(tmp_path, boot="a", clean=True)
    assert not (tmp_path / MARKER_FILE).exists()
    assert not run(tmp_path, boot="b", clean=True)  # a reboot after a clean close loses nothing


def test_a_process_crash_is_clean_a_power_loss_is_not(tmp_path: Path) -> None:
    assert not run(tmp_path, boot="a", clean=False)
    assert (tmp_path / MARKER_FILE).exists()
    # Same boot: the OS kept every write.
    assert not run(tmp_path, boot="a", clean=False)
    # The machine rebooted since the run that did not close.
    assert run(tmp_path, boot="b", clean=True)
    assert not run(tmp_path, boot="c", clean=True)


def test_with_sync_a_store_is_never_unclean(tmp_path: Path) -> None:
    assert not run(tmp_path, boot="a", sync=True, clean=False)
    assert not run(tmp_path, boot="b", sync=True, clean=False)
    # The previous run's mode decides: a sync=True run lost nothing, even if this one runs without.
    assert not run(tmp_path, boot="c", sync=False, clean=False)
    assert run(tmp_path, boot="d", sync=True, clean=True)


def test_an_unknown_boot_id_counts_every_unclean_close(tmp_path: Path) -> None:
    assert not run(tmp_path, boot=None, clean=False)
    assert run(tmp_path, boot=None, clean=False)
    assert run(tmp_path, boot="a", clean=True)  # the verdict stands until a clean close
    assert not run(tmp_path, boot=None, clean=True)


def test_the_verdict_survives_a_crash_before_a_clean_close(tmp_path: Path) -> None:
    assert not run(tmp_path, boot="a", clean=False)
    assert run(tmp_path, boot="b", clean=False)
    # Crashed again on the same boot before a clean close: still unclean.
    assert run(tmp_path, boot="b", clean=False)
    assert run(tmp_path, boot="b", clean=True)
    assert not run(tmp_path, boot="b", clean=True)


def test_a_readonly_store_neither_judges_nor_writes(tmp_path: Path) -> None:
    assert not run(tmp_path, boot="a", clean=False)
    marker = (tmp_path / MARKER_FILE).read_bytes()
    ro = MetadataStore.open(tmp_path, readonly=True, boot_id="b")
    assert not ro.unclean_shutdown
    ro.close()
    assert (tmp_path / MARKER_FILE).read_bytes() == marker


def test_a_marker_that_does_not_parse_counts_as_unclean(tmp_path: Path) -> None:
    (tmp_path / MARKER_FILE).write_bytes(b"\xff not json")
    assert opened(str(tmp_path), sync=False, boot_id="a")
    closed_cleanly(str(tmp_path))
    assert not opened(str(tmp_path), sync=False, boot_id="a")
    with pytest.raises(ValueError):
        opened(str(tmp_path), sync=False, boot_id="")


def test_read_boot_id(tmp_path: Path) -> None:
    f = tmp_path / "boot_id"
    f.write_text("0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n")
    assert read_boot_id(str(f)) == "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
    assert read_boot_id(str(tmp_path / "missing")) is None
    f.write_text("")
    assert read_boot_id(str(f)) is None
