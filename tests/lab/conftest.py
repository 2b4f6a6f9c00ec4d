"""The toy campaign-4 the campaign tests run commands against: the committed declaration in a
folder of the test's own, with the one loaded ``campaign.py`` module pointed at it and its
``torch-mars`` calls recorded instead of trained."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from lab.fight_map import FightMap

from benchmark_scripts import load_benchmark_script


@dataclass
class ToyCampaign:
    """``folder``: the campaign's folder (its campaign.json the committed campaign-4's);
    ``called``: the argument lists of the ``torch-mars`` commands it ran, in order."""

    module: ModuleType
    folder: Path
    called: list[list[str]] = field(default_factory=list)

    def point(self, label: str) -> Path:
        """The folder of ``label`` (``model/point``), made."""
        folder = self.folder / label
        folder.mkdir(parents=True, exist_ok=True)
        return folder


@pytest.fixture
def toy_campaign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ToyCampaign:
    campaign = load_benchmark_script("studies/campaign.py")
    toy = ToyCampaign(campaign, tmp_path / "campaign-4")
    toy.folder.mkdir()
    shutil.copy(campaign.declaration_of("campaign-4"), toy.folder / "campaign.json")
    monkeypatch.setattr(campaign, "folder_of", lambda name: toy.folder)
    monkeypatch.setattr(campaign, "MAP", FightMap(tmp_path))
    monkeypatch.setattr(campaign, "torch_mars", lambda argv: toy.called.append(argv) or 0)
    return toy
