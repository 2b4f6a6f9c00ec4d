"""Where a study lives: an Optuna storage, and the lock under which workers claim runs.

A storage is named by ``--storage``:

- nothing: an SQLite file ``study.db`` in the study folder;
- an SQLAlchemy URL (``sqlite:///PATH``, ``postgresql://...``, ``mysql://...``): Optuna's
  ``RDBStorage``, which workers on many machines can share;
- ``journal:PATH`` or a plain path: Optuna's ``JournalStorage`` over an append-only file, for a
  file system that workers share (and a text file that git keeps well).

Workers plan and claim runs under one lock per study (:func:`claim_lock`), so two workers never
claim the same run: an ``flock`` beside a file storage, an advisory lock in PostgreSQL or MySQL.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path

import optuna

DEFAULT_STORAGE_FILE = "study.db"
JOURNAL_PREFIX = "journal:"


def storage_url(spec: str | None, study_dir: Path) -> str:
    """The storage ``spec`` names, as a URL or ``journal:PATH`` (absolute paths)."""
    if not spec:
        return f"sqlite:///{(Path(study_dir) / DEFAULT_STORAGE_FILE).resolve()}"
    if "://" in spec:
        return spec
    path = Path(spec.removeprefix(JOURNAL_PREFIX)).expanduser()
    if not path.name or path.is_dir():
        raise ValueError(f"--storage {spec!r}: a journal storage names a file, not a folder")
    return JOURNAL_PREFIX + str(path.resolve())


def _file_of(url: str) -> Path | None:
    if url.startswith(JOURNAL_PREFIX):
        return Path(url.removeprefix(JOURNAL_PREFIX))
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """The Optuna storage of ``url`` (from :func:`storage_url`); its folder is made."""
    path = _file_of(url)
    if path is not None:
        if path.parent.exists() and not path.parent.is_dir():
            raise ValueError(f"--storage: {path.parent} is a file, not a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        _cut_unfinished_line(path)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    return optuna.storages.RDBStorage(url)


def _cut_unfinished_line(path: Path) -> None:
    """Cut a journal's last line if a kill (or a copy taken mid-write) left it without its
    newline: Optuna skips such a line, but a line appended after it would make the journal
    unreadable. Done under the journal's own lock, which every append takes."""
    if not path.is_file():
        return
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with path.open("rb+") as handle:
            text = handle.read()
            if text and not text.endswith(b"\n"):
                handle.truncate(text.rfind(b"\n") + 1)
    finally:
        lock.release()


def describe(url: str) -> str:
    """``url`` without a password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


@contextlib.contextmanager
def claim_lock(url: str, storage: optuna.storages.BaseStorage, study: str) -> Iterator[None]:
    """Hold the study's claim lock while the block runs (blocking until it is free)."""
    path = _file_of(url)
    if path is not None:
        lock_path = path.with_name(path.name + ".claim-lock")
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    storage = getattr(storage, "_backend", storage)  # a study's storage wraps its database's
    if not isinstance(storage, optuna.storages.RDBStorage):
        raise ValueError(f"no claim lock for storage {describe(url)}")
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(study.encode()).digest()[:8], "big", signed=True)
    dialect = storage.engine.dialect.name
    if dialect == "postgresql":
        acquire, release = "SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"
    elif dialect == "mysql":
        acquire, release = "SELECT GET_LOCK(:key, -1)", "SELECT RELEASE_LOCK(:key)"
    else:
        raise ValueError(f"--storage: no claim lock for {dialect}; use postgresql, mysql or a file")
    with storage.engine.connect() as connection:
        connection.execute(text(acquire), {"key": key if dialect == "postgresql" else str(key)})
        try:
            yield
        finally:
            connection.execute(text(release), {"key": key if dialect == "postgresql" else str(key)})
