"""Library code reads time and randomness only through partlog.runtime
(tests/direct_reads.py): a direct ``time.monotonic()`` or ``uuid.uuid4()``
would leak the real world into the deterministic simulation unseen.

How to see it fail: add ``from time import monotonic`` to any module of
``partlog/store/`` and run this file; the first test names the file and
line.  The second shows the checker catching each kind of read in a
temporary tree."""

from __future__ import annotations

from pathlib import Path

from tests.direct_reads import direct_reads
from tests.paths import REPO


def test_no_direct_reads_of_clocks_or_entropy() -> None:
    found = [str(r) for r in direct_reads(REPO)]
    assert not found, "read through partlog.runtime's Clock/Entropy instead (tests/direct_reads.py):\n" + "\n".join(
        found
    )


def test_the_checker_finds_each_kind_of_read(tmp_path: Path) -> None:
    pkg = tmp_path / "partlog"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "ok.py").write_text(
        "import random, secrets, time, uuid\n"
        "from partlog.runtime import SYSTEM_CLOCK\n"
        "rng = random.Random(7)\n"  # seeded: fine
        "same = secrets.compare_digest(b'a', b'a')\n"  # draws nothing
        "uuid.uuid5(uuid.NAMESPACE_DNS, 'x')\n"  # a pure function
        "time.sleep(0)\n"  # waits, reads nothing
        "now = SYSTEM_CLOCK.wall_ms()\n"
    )
    (pkg / "bad.py").write_text(
        "import time as t\n"
        "import datetime\n"
        "import os, random, secrets, uuid\n"
        "from time import monotonic\n"
        "from datetime import datetime as dt\n"
        "def f(clock=t.perf_counter):\n"
        "    return t.time(), datetime.datetime.now(), dt.utcnow(), secrets.token_hex(4),\\\n"
        "        uuid.uuid4(), random.random(), random.Random(), os.urandom(2)\n"
    )
    (pkg / "tools" / "bench.py").write_text("import time\nstart = time.perf_counter()\n")  # exempt
    found = [(r.path, r.what) for r in direct_reads(tmp_path, ("partlog",))]
    assert all(path == "partlog/bad.py" for path, _ in found), found
    assert sorted(what for _, what in found) == sorted(
        [
            "from time import monotonic",
            "time.perf_counter",
            "time.time",
            "datetime.datetime.now",
            "dt.utcnow",
            "secrets.token_hex",
            "uuid.uuid4",
            "random.random",
            "random.Random() without a seed",
            "os.urandom",
        ]
    )
