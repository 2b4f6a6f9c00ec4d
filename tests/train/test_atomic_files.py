"""A file replaced atomically is whole or not there: the old text stays if the write fails,
and no temporary file is left beside it."""

from __future__ import annotations

import pytest

from torch_mars.atomic_files import write_text_atomically


def test_a_replaced_file_holds_the_new_text_and_nothing_is_left_beside_it(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text("old\n")
    write_text_atomically(target, "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "tune.json"
    target.write_text("{}\n")

    with pytest.raises(TypeError):
        write_text_atomically(target, 3)  # type: ignore[arg-type]
    assert target.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["tune.json"]
