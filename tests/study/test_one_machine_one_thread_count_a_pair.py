"""A verdict's pairs train both sides on one machine at one thread count (a run differs in its
last digits at another thread count, as on another machine): within one study and across the
studies a fixed-gamma control reads, a pair whose sides did not is left out, and a two-look
gap's first look counts only its kept pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_mars.train.study.family import Comparison
from torch_mars.train.study.family_reads import fixed_gamma_folder, stored_verdicts
from torch_mars.train.study.pairs import machine_of

EPYC = "AMD EPYC, AVX512"
PAIRS = [[1000 + k, 2000 + k] for k in range(6)]


def test_a_runs_machine_names_its_device_and_threads():
    one, two = (
        machine_of({"device": EPYC, "threads": 1}),
        machine_of({"device": EPYC, "threads": 2}),
    )
    assert one != two and EPYC in one
    assert machine_of({"device": EPYC}) == EPYC  # threads not recorded (older runs)
    assert machine_of({"threads": 1}) == ""  # no device: unknown, pairs with nothing


def _report(folder: Path, finals: list[float], machines: list[str] | None) -> None:
    folder.mkdir(parents=True)
    entry = {"optimizer": "mars-adamw", "finished": True, "heldout_pairs": PAIRS}
    entry |= {"heldout_finals": finals, "winner": {"lr": 0.01, "gamma": 0.1}}
    if machines is not None:
        entry["heldout_machines"] = machines
    (folder / "tune.json").write_text(json.dumps({"optimizers": [entry], "verdicts": []}))


@pytest.mark.parametrize("recorded", [True, False])
def test_a_fixed_gamma_read_leaves_out_the_pairs_trained_at_another_thread_count(
    tmp_path, recorded
):
    one, two = f"{EPYC} · 1 thread(s)", f"{EPYC} · 2 thread(s)"
    rule = [1.70, 1.71, 1.69, 1.70, 1.71, 1.50]
    at_zero = [1.72, 1.72, 1.71, 1.72, 1.73, 1.72]
    _report(tmp_path / "m" / "p", rule, [one] * 5 + [two] if recorded else None)
    other = fixed_gamma_folder(tmp_path, "m/p", "mars-adamw", 0.0)
    _report(other, at_zero, [one] * 6 if recorded else None)
    comparison = Comparison("mars-adamw", ("mars-adamw@gamma=0",), "m/p")
    ((gap, _),) = stored_verdicts(tmp_path, [comparison]).values()
    if recorded:  # the last pair's rule run trained at 2 threads, its control at 1
        assert gap.pairs == 5
        assert gap.mean == pytest.approx(-0.018, abs=1e-9)
    else:  # a record before machines were stored is read whole
        assert gap.pairs == 6


def test_a_two_look_gap_counts_only_the_kept_pairs_of_its_first_look(tmp_path):
    one, two = f"{EPYC} · 1 thread(s)", f"{EPYC} · 2 thread(s)"
    rule = [1.70, 1.71, 1.69, 1.70, 1.71, 1.70]
    _report(tmp_path / "m" / "p", rule, [two] + [one] * 5)
    other = fixed_gamma_folder(tmp_path, "m/p", "mars-adamw", 0.0)
    _report(other, [1.72] * 6, [one] * 6)
    comparison = Comparison("mars-adamw", ("mars-adamw@gamma=0",), "m/p")
    ((gap, _),) = stored_verdicts(tmp_path, [comparison], first=3).values()
    assert gap.pairs == 5
    assert [stage[-1] for stage in gap.stages] == [2, 3]  # 3 first pairs, one left out
