"""No test waits on the clock: no sleeps, no polling against a deadline, no time limit on a
subprocess. CI and users run the suite on machines faster and slower than ours, and a test
whose outcome depends on speed fails on one of them (the killed-sweep test did, one run in
three). A test that needs another process at a given point makes that process announce it
(a line on a pipe, an event) and waits for that."""

from __future__ import annotations

import re
from pathlib import Path

CLOCK = re.compile(r"\btime\.(sleep|monotonic|perf_counter)\(|\btimeout=\d|\.poll\(\)")


def test_no_test_sleeps_polls_or_races_a_deadline():
    here = Path(__file__).resolve()
    offenders = [
        f"{path.relative_to(here.parents[1])}:{number}: {line.strip()}"
        for path in sorted(here.parents[1].rglob("*.py"))
        if path != here
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if CLOCK.search(line)
    ]
    assert not offenders, "\n".join(offenders)
