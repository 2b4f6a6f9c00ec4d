"""``torch-mars doctor`` on CPU: the report names the versions, finds every path within its
tolerance, times the step against fused AdamW, and is written where asked."""

from __future__ import annotations

import torch

import torch_mars.bench.doctor as doctor
from torch_mars.cli import main


def test_doctor_writes_a_report_with_every_section(tmp_path, capsys):
    out = tmp_path / "doctor.md"
    code = main(
        ["doctor", "--device", "cpu", "--model", "tiny", "--repeats", "1", "--out", str(out)]
    )
    assert code == 0
    report = out.read_text()
    assert report in capsys.readouterr().out
    for text in (
        "## Environment",
        f"| torch | {torch.__version__} |",
        "## Parity",
        "## One optimizer step",
    ):
        assert text in report
    for rule in ("mars-adamw", "mars-lion", "mars-shampoo", "mars-m"):
        for path in ("loop", "foreach", "fused (compiled)"):
            assert f"| {rule} | {path} |" in report
    assert "| NO |" not in report
    assert "| adamw-fused |" in report and "| mars-adamw-fused |" in report


def test_doctor_fails_when_a_path_is_off(monkeypatch, tmp_path):
    """A path outside its tolerance is reported and makes the exit status 1."""
    monkeypatch.setattr(doctor, "TOLERANCES", {rule: -1.0 for rule in doctor.TOLERANCES})
    monkeypatch.setattr(doctor, "timing", lambda device, model, repeats: "(timing skipped)")
    code = doctor.run_doctor(doctor.DoctorOptions(device="cpu", out=tmp_path / "r.md"))
    assert code == 1
    assert "| NO |" in (tmp_path / "r.md").read_text()
