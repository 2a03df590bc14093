"""walmgr's TLS options (issue 13) are all or nothing, and name what is missing
(walmgr reaching brokers over mutual TLS is in tests/integration/test_walmgr_tls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partlog.rpc.tls import TlsConfigError, mutual_tls
from walmgr.config import WalmgrConfig, WalmgrConfigError

DEADLINE_MS = 800


def _config(tmp_path: Path, registry: str, **tls: str) -> WalmgrConfig:
    return WalmgrConfig.for_cli(
        "file://" + str(tmp_path / "objects"),
        str(tmp_path / registry),
        commit_deadline_ms=DEADLINE_MS,
        max_clock_skew_ms=100,
        grace_ms=100,
        check_timeout_ms=3_000,
        **tls,
    )


def test_tls_options_are_all_or_nothing(tmp_path: Path, certs: Path) -> None:
    assert mutual_tls("", "", "") is None
    with pytest.raises(TlsConfigError, match="missing: key"):
        mutual_tls(str(certs / "ca.crt"), str(certs / "client.crt"), "")
    with pytest.raises(TlsConfigError, match=r"certificate file .*nope\.crt: not found"):
        mutual_tls(str(certs / "ca.crt"), str(tmp_path / "nope.crt"), str(certs / "client.key"))
    with pytest.raises(WalmgrConfigError, match="tls_key_file"):
        _config(tmp_path, "r", tls_ca_file="a", tls_cert_file="b")
