"""CRC-32C (Castagnoli), as Kafka's v2 record batches use it.

``crc32c`` is the ``crc32c`` package (SSE 4.2 / ARMv8 instructions where the
CPU has them, a table otherwise); ``crc32c_crcmod`` is crcmod's C extension,
which gives the same values.  Measured here (``partlog bench commit``
prints both): 0.18 us against 0.62 us for a 113-byte store entry, 5 us
against 204 us for a 64 KiB batch, so every hot path uses the first.
crcmod stays for ``crc32c_update``'s raw register arithmetic and as the
reference the tests compare with.  ``crc32c_update`` exploits that CRC-32C is
affine: when only a few bytes near the start of a long message change, the new
CRC follows from the old one, the XOR of the changed bytes and the message
length, without reading the rest of the message.  The leader needs this to
patch a batch header (LogAppendTime changes CRC-covered bytes) while the
records themselves stay in the WAL object it never sees.
"""

from __future__ import annotations

from collections.abc import Callable

import crc32c as _hardware
import crcmod

crc32c_crcmod = crcmod.mkCrcFun(0x11EDC6F41, initCrc=0, rev=True, xorOut=0xFFFFFFFF)
"""CRC-32C of ``data`` (init 0xFFFFFFFF, reflected, final XOR 0xFFFFFFFF), by crcmod."""

# The package's function itself: the hot paths pay no wrapper frame.
crc32c: Callable[[bytes | bytearray | memoryview], int] = _hardware.crc32c
"""CRC-32C of ``data`` (init 0xFFFFFFFF, reflected, final XOR 0xFFFFFFFF)."""

_crc32c_raw = crcmod.mkCrcFun(0x11EDC6F41, initCrc=0, rev=True, xorOut=0)

_POLY_REVERSED = 0x82F63B78


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial, in the reflected bit order."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY_REVERSED if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


_X2N = _x2n_table()


def _shift_zero_bytes(raw: int, count: int) -> int:
    """The raw CRC register after ``count`` more zero bytes, in O(log count)."""
    p = 1 << 31  # x^0
    k = 3  # bytes -> bits is a factor 2^3
    while count:
        if count & 1:
            p = _multmodp(_X2N[k & 31], p)
        count >>= 1
        k += 1
    return _multmodp(p, raw)


def crc32c_update(old_crc: int, old_prefix: bytes, new_prefix: bytes, total_len: int) -> int:
    """CRC-32C of a message of ``total_len`` bytes whose first bytes changed.

    ``old_crc`` is the CRC of the original message, which started with
    ``old_prefix``; the new message starts with ``new_prefix`` (same length) and
    is otherwise identical.
    """
    if len(old_prefix) != len(new_prefix):
        raise ValueError("prefixes must have the same length")
    if len(old_prefix) > total_len:
        raise ValueError("prefix longer than the message")
    delta = bytes(a ^ b for a, b in zip(old_prefix, new_prefix, strict=True))
    return old_crc ^ _shift_zero_bytes(_crc32c_raw(delta), total_len - len(delta))
