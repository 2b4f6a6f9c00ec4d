"""The embedded default corpus: the bytes of the Python standard library this interpreter runs
on. Every install has it, so the main job needs no download and no data files in the repo."""

from __future__ import annotations

import sysconfig
import zlib
from pathlib import Path

import numpy as np

from torch_mars.data.corpus import TokenCorpus

TEST_PACKAGES = frozenset({"test", "tests", "idle_test"})
VAL_ONE_IN = 20


def stdlib_source_files(root: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files in sorted order, ``pydoc_data/topics.py`` (the
    documentation topics) included, without site-packages or the test suites (which hold
    deliberately malformed sources)."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = [
        path
        for path in sorted(root.rglob("*.py"))
        if not {"site-packages", "dist-packages", "__pycache__"} & set(path.parts)
        and not TEST_PACKAGES & set(path.relative_to(root).parts)
    ]
    if not files:
        raise FileNotFoundError(f"no .py files found under the standard library folder {root}")
    return files


def is_validation_file(relative_path: str) -> bool:
    """Whether a file (path relative to the stdlib root, POSIX form) belongs to the validation
    split: one file in ``VAL_ONE_IN`` by a CRC-32 of its path, so the split is the same on every
    machine with the same Python version."""
    return zlib.crc32(relative_path.encode()) % VAL_ONE_IN == 0


class StdlibCorpus(TokenCorpus):
    """Byte-level corpus (vocab 256) of the standard library's sources, split into train and
    val by file (see :func:`is_validation_file`).

    Example:
        >>> corpus = StdlibCorpus()
        >>> corpus.vocab_size, len(corpus.train) > 10 * len(corpus.val) > 0
        (256, True)
    """

    def __init__(self, root: Path | None = None) -> None:
        root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
        files = stdlib_source_files(root)
        parts: dict[bool, list[bytes]] = {True: [], False: []}
        for path in files:
            parts[is_validation_file(path.relative_to(root).as_posix())].append(path.read_bytes())
        train = np.frombuffer(b"".join(parts[False]), dtype=np.uint8)
        val = np.frombuffer(b"".join(parts[True]), dtype=np.uint8)
        super().__init__(train, val, 256, f"Python {sysconfig.get_python_version()} stdlib")
