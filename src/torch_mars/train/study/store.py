"""Where a study lives: an Optuna storage, the lock under which workers claim runs, and the one
adapter to what Optuna keeps private (no other module touches an Optuna attribute that starts
with ``_``).

A storage is named by ``--storage``:

- nothing: an SQLite file ``study.db`` in the study folder;
- an SQLAlchemy URL (``sqlite:///PATH``, ``postgresql://...``, ``mysql://...``): Optuna's
  ``RDBStorage``, which workers on many machines can share. ``postgresql://`` takes whichever
  psycopg driver is installed (psycopg 3 or psycopg2);
- ``journal:PATH`` or a plain path: Optuna's ``JournalStorage`` over an append-only file, for a
  file system that workers share (and a text file that git keeps well).

Every failure to open one (an unknown scheme, a server that does not answer, a damaged or
foreign file, a folder that cannot be written) is a :class:`StorageError`: one line naming the
storage. A journal is read line by line before it is opened: a damaged line is named by file
and number, and nothing is appended to a journal that has one.

Workers plan and claim runs under one lock per study (:func:`claim_lock`), so two workers never
claim the same run: an ``flock`` beside a file storage, an advisory lock in PostgreSQL or MySQL.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import gzip
import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

DEFAULT_STORAGE_FILE = "study.db"
# The system attribute of a trial that names the worker that claimed it (host, process, device,
# threads): who trains it, and where a finished run was trained.
OWNER_ATTR = "torch_mars_owner"
# The run a trial trained: (optimizer, point key, seed, data seed).
RunId = tuple[str, str, int, int]
JOURNAL_PREFIX = "journal:"
_URL_SCHEMES = ("sqlite", "postgresql", "mysql")
# Optuna's journal operation codes (optuna.storages.journal's JournalOperation, 0-10).
_JOURNAL_OPS = range(11)


class StorageError(ValueError):
    """A storage that cannot be opened or used, in one line naming it."""


def refuse_link(path: Path, what: str = "a study's file") -> None:
    """Refuse ``path`` where it is a symbolic link (followed or dangling): a study's files are
    its own, and a link would make a study read, write or delete outside its folder."""
    if os.path.islink(path):
        raise StorageError(
            f"{path} is a link (to {os.readlink(path)}): {what} must be a file of its own; "
            "refused (nothing read or written through it)"
        )


def storage_url(spec: str | None, study_dir: Path) -> str:
    """The storage ``spec`` names, as a URL or ``journal:PATH`` (absolute paths)."""
    if not spec:
        return f"sqlite:///{Path(os.path.abspath(study_dir)) / DEFAULT_STORAGE_FILE}"
    if "://" in spec:
        scheme = spec.split("://", 1)[0].split("+", 1)[0]
        if scheme not in _URL_SCHEMES:
            raise StorageError(
                f"--storage {describe(spec)}: unknown scheme {scheme!r}; use "
                f"{', '.join(s + '://' for s in _URL_SCHEMES)} or journal:PATH"
            )
        return _with_installed_driver(spec)
    head, colon, _ = spec.partition(":")
    if colon and not spec.startswith(JOURNAL_PREFIX) and head.isalpha() and len(head) > 1:
        raise StorageError(
            f"--storage {spec!r}: unknown prefix {head + ':'!r}; a journal is journal:PATH"
        )
    path = Path(spec.removeprefix(JOURNAL_PREFIX)).expanduser()
    if not path.name or path.is_dir():
        raise StorageError(f"--storage {spec!r}: a journal storage names a file, not a folder")
    return JOURNAL_PREFIX + os.path.abspath(path)


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` with the psycopg driver that is installed spelled out (SQLAlchemy's
    default driver for the bare scheme changed between releases)."""
    if not url.startswith("postgresql://"):
        return url
    for module, driver in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{driver}://" + url.removeprefix("postgresql://")
    raise StorageError(
        f"--storage {describe(url)}: no PostgreSQL driver; pip install psycopg2-binary"
    )


def _file_of(url: str) -> Path | None:
    if url.startswith(JOURNAL_PREFIX):
        return Path(url.removeprefix(JOURNAL_PREFIX))
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def is_missing(url: str) -> bool:
    """Whether ``url`` names a file storage that does not exist (nor its snapshot)."""
    path = _file_of(url)
    if path is None:
        return False
    snapshot = path.with_name(path.name + ".gz")
    return not path.exists() and not (url.startswith(JOURNAL_PREFIX) and snapshot.is_file())


def open_storage(url: str, create: bool = True) -> optuna.storages.BaseStorage:
    """The Optuna storage of ``url`` (from :func:`storage_url`); its folder is made where
    ``create``, and a file storage that does not exist is an error where not. A journal that
    does not exist but has a snapshot beside it (``study.log.gz``, :func:`snapshot_journals`)
    starts from that snapshot: the study resumes rather than begins anew beside its own runs,
    and a worker or a report opens a study that exists only as its snapshot."""
    path = _file_of(url)
    if path is not None:
        refuse_link(path, "a study's storage")
        if url.startswith(JOURNAL_PREFIX):
            refuse_link(path.with_name(path.name + ".gz"), "a study's snapshot")
    if path is not None and url.startswith(JOURNAL_PREFIX):
        _restore_snapshot(path)  # a landed study opens from its snapshot, to report or join
    if path is not None:
        if path.parent.exists() and not path.parent.is_dir():
            raise StorageError(f"--storage {describe(url)}: {path.parent} is a file, not a folder")
        if path.exists() and not path.is_file():
            raise StorageError(
                f"--storage {describe(url)}: {path} is not a regular file (a FIFO, device or "
                "folder): a study is stored in a file of its own"
            )
        if not create and not path.is_file():
            raise StorageError(f"--storage {describe(url)}: no such file {path}")
        if url.startswith("sqlite") and path.is_file():
            _check_sqlite_is_ours(path, url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StorageError(f"--storage {describe(url)}: {error.strerror}") from None
        if not os.access(path.parent, os.W_OK):
            raise StorageError(f"--storage {describe(url)}: the folder {path.parent} is read-only")
    try:
        if url.startswith(JOURNAL_PREFIX):
            from optuna.storages.journal import JournalFileBackend

            _check_journal(path)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        return optuna.storages.RDBStorage(url)
    except StorageError:
        raise
    except Exception as error:  # SQLAlchemy's and the drivers' errors have no common base
        raise StorageError(f"--storage {describe(url)}: {_first_line(error)}") from None


# Tables of Optuna's RDB schema; an SQLite file with tables, none of them these, is another
# application's database.
_OPTUNA_TABLES = frozenset({"studies", "trials", "version_info", "alembic_version"})


def _check_sqlite_is_ours(path: Path, url: str) -> None:
    """Refuse an SQLite file that holds another application's tables (Optuna would add its own
    to it): one line naming them."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    except sqlite3.DatabaseError:
        return  # not an SQLite file: Optuna's own error names it, in one line
    if tables and not tables & _OPTUNA_TABLES:
        shown = ", ".join(sorted(tables)[:5])
        raise StorageError(
            f"--storage {describe(url)}: {path} holds another application's tables ({shown}); "
            "give a study a file of its own"
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _check_journal(path: Path) -> None:
    """Cut a last line a kill left without its newline (Optuna skips it, but a line appended
    after it would make the journal unreadable), then refuse a journal with a line that is not
    an Optuna operation, naming the file and line. Under the journal's own lock."""
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
                text = text[: text.rfind(b"\n") + 1]
    finally:
        lock.release()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            op = json.loads(line).get("op_code")
        except (ValueError, AttributeError):
            op = None
        if op not in _JOURNAL_OPS:
            raise StorageError(
                f"--storage journal:{path}: line {number} is not a journal operation; "
                "the journal is left as it is (remove or repair that line)"
            )


@contextlib.contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """Turn a storage's failure while in use (a database gone, a disk full or read-only) into
    a :class:`StorageError` naming the storage."""
    import errno

    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as error:
        raise StorageError(f"--storage {describe(url)}: {_first_line(error)}") from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT):
            raise
        raise StorageError(f"--storage {describe(url)}: {error.strerror}") from None


def describe(url: str) -> str:
    """``url`` without a password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url


def dashboard_hint(url: str) -> str:
    """The command that browses the study at ``url``, its password masked (type it in)."""
    return f"browse the study: optuna-dashboard {describe(url).removeprefix('journal:')}"


def study_names(storage: optuna.storages.BaseStorage) -> set[str]:
    return {s.study_name for s in optuna.get_all_study_summaries(storage)}


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage)


def delete_study(storage: optuna.storages.BaseStorage, name: str) -> None:
    optuna.delete_study(study_name=name, storage=storage)


def _storage_of(source: optuna.Study | optuna.storages.BaseStorage) -> Any:
    storage = source._storage if isinstance(source, optuna.Study) else source
    return getattr(storage, "_backend", storage)  # a study's storage wraps its database's


def _new_trial(
    study: optuna.Study,
    params: dict[str, tuple[Any, BaseDistribution]],
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
    state: TrialState,
    value: float | None = None,
    times: tuple[datetime.datetime | None, datetime.datetime | None] = (None, None),
) -> int:
    """A trial with its parameters, labels, attributes and state created in one storage write
    (one transaction of an RDB storage, one line of a journal): a kill leaves it whole or
    absent. Returns its id."""
    template = FrozenTrial(
        number=-1,
        state=state,
        value=value,
        datetime_start=times[0],
        datetime_complete=times[1],
        params={name: value for name, (value, _) in params.items()},
        distributions={name: distribution for name, (_, distribution) in params.items()},
        user_attrs=user_attrs,
        system_attrs=system_attrs,
        intermediate_values={},
        trial_id=-1,
    )
    return study._storage.create_new_trial(study._study_id, template_trial=template)


def create_claimed_trial(
    study: optuna.Study,
    params: dict[str, tuple[Any, BaseDistribution]],
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
) -> optuna.Trial:
    """A RUNNING trial with its parameters, labels and owner, created in one storage write."""
    now = (datetime.datetime.now(), None)
    trial_id = _new_trial(study, params, user_attrs, system_attrs, TrialState.RUNNING, None, now)
    return optuna.Trial(study, trial_id)


def owner_of(trial: FrozenTrial) -> dict[str, Any]:
    """The owner record of ``trial`` (empty where it has none); one that is not a record was
    edited outside tune, said in one line."""
    owner = trial.system_attrs.get(OWNER_ATTR)
    if owner is None:
        return {}
    if not isinstance(owner, dict):
        raise ValueError(
            f"trial {trial.number} of the study stores its owner record as {owner!r}, not a "
            "record: the study's data were changed outside tune"
        )
    return owner


def run_of(trial: FrozenTrial) -> RunId | None:
    """The run a trial trained (None for a trial of no run)."""
    attrs = trial.user_attrs
    if "point" not in attrs:
        return None
    return (attrs["optimizer"], attrs["point"], attrs["seed"], attrs.get("data_seed", 0))


def add_finished_trial(
    study: optuna.Study,
    params: dict[str, tuple[Any, BaseDistribution]],
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
    like: FrozenTrial,
) -> None:
    """A finished trial with ``like``'s state, value and times (a run another study trained),
    created in one storage write."""
    times = (like.datetime_start, like.datetime_complete)
    _new_trial(study, params, user_attrs, system_attrs, like.state, like.value, times)


def fail_trial(study: optuna.Study, trial: FrozenTrial) -> None:
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def set_heartbeat(study: optuna.Study, trial: optuna.Trial, key: str, value: float) -> None:
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


@contextlib.contextmanager
def claim_lock(
    url: str, source: optuna.Study | optuna.storages.BaseStorage, study: str
) -> Iterator[None]:
    """Hold the study's claim lock while the block runs (blocking until it is free);
    ``source`` is the study or its storage."""
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
    storage = _storage_of(source)
    if not isinstance(storage, optuna.storages.RDBStorage):
        raise StorageError(f"no claim lock for storage {describe(url)}")
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(study.encode()).digest()[:8], "big", signed=True)
    dialect = storage.engine.dialect.name
    if dialect == "postgresql":
        acquire, release = "SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"
    elif dialect == "mysql":
        acquire, release = "SELECT GET_LOCK(:key, -1)", "SELECT RELEASE_LOCK(:key)"
    else:
        raise StorageError(
            f"--storage: no claim lock for {dialect}; use postgresql, mysql or a file"
        )
    with storage.engine.connect() as connection:
        connection.execute(text(acquire), {"key": key if dialect == "postgresql" else str(key)})
        try:
            yield
        finally:
            connection.execute(text(release), {"key": key if dialect == "postgresql" else str(key)})


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]{0,99}")


def check_study_name(name: str) -> str:
    """``name`` if it names a folder inside the output folder and a study in a storage; else a
    ValueError saying what a name may hold (no '/', no leading '.' or '-': a name is never a
    path, so no name puts a study outside its output folder)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name {name!r} is not a name: 1-100 of A-Z a-z 0-9 _ . = + -, not starting with "
            "'.' or '-', no '/'"
        )
    return name


# ---------------------------------------------------------------- journals that land

# The study's user attribute that holds the protocols it ran under before its current one.
PROTOCOL_HISTORY_ATTR = "protocol_history"


def snapshot_journals(folder: Path) -> list[Path]:
    """``study.log.gz`` beside each live journal (``study.log``) under ``folder``, each written
    whole, then moved into place (what lands in the repository: a live journal does not).
    A journal that a worker is appending to is taken up to its last whole line: a study may
    land mid-way and resume from its snapshot in another checkout, and a torn last line there
    would make the next appended record unreadable."""
    written = []
    for live in sorted(Path(folder).glob("**/study.log")):
        target = live.with_suffix(".log.gz")
        partial = target.with_suffix(".gz.partial")
        for path in (live, target, partial):
            refuse_link(path)
        records = live.read_bytes()
        with (
            _open_new(partial) as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed,
        ):
            packed.write(records[: records.rfind(b"\n") + 1])
        partial.replace(target)
        written.append(target)
    return written


def _open_new(path: Path) -> Any:
    """``path`` opened for writing without following a link planted there (``O_NOFOLLOW``):
    a link is refused, an old file of ours replaced."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.fdopen(os.open(path, flags, 0o644), "wb")
    except OSError as error:
        refuse_link(path)
        raise StorageError(f"{path}: {error.strerror}") from None


def restore_journals(folder: Path) -> None:
    """Start each journal under ``folder`` from its snapshot where the live one is missing."""
    for snapshot in sorted(Path(folder).glob("**/study.log.gz")):
        _restore_snapshot(snapshot.with_suffix(""))


def _restore_snapshot(live: Path) -> None:
    """``live`` unpacked from its snapshot ``live.gz`` where ``live`` is missing and the
    snapshot is there; written whole beside it, then linked into place, so that two workers
    restoring at once leave one whole journal and neither overwrites a live one."""
    snapshot = live.with_name(live.name + ".gz")
    refuse_link(live, "a study's journal")
    refuse_link(snapshot, "a study's snapshot")
    if live.exists() or not snapshot.is_file():
        return
    partial = live.with_name(f"{live.name}.restoring-{os.getpid()}")
    try:
        with gzip.open(snapshot, "rb") as source, partial.open("wb") as target:
            shutil.copyfileobj(source, target)
        os.link(partial, live)
    except FileExistsError:
        pass  # another worker restored it first: its journal stands
    except (OSError, EOFError) as error:
        raise StorageError(
            f"--storage journal:{live}: its snapshot {snapshot.name} cannot be unpacked "
            f"({_first_line(error)}); the snapshot is left as it is"
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def stored_study_folders(folder: Path) -> list[Path]:
    """Each folder below ``folder`` that holds a study: a live journal or its snapshot (a clean
    checkout has only the snapshot)."""
    found = {
        journal.parent
        for pattern in ("*/**/study.log", "*/**/study.log.gz")
        for journal in Path(folder).glob(pattern)
    }
    return sorted(found)


def stored_study(study_dir: Path) -> tuple[list[FrozenTrial], dict[str, Any], list[dict]]:
    """A study's trials, identity and protocol history (oldest first), read from its live
    journal in ``study_dir`` or else its snapshot, through a temporary copy: neither is
    changed."""
    live = Path(study_dir) / "study.log"
    refuse_link(live)
    refuse_link(live.with_suffix(".log.gz"))
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "study.log"
        if live.is_file():
            shutil.copyfile(live, copy)
        else:
            snapshot = live.with_suffix(".log.gz")
            try:
                with gzip.open(snapshot, "rb") as packed, copy.open("wb") as out:
                    shutil.copyfileobj(packed, out)
            except (OSError, EOFError) as error:
                raise StorageError(
                    f"{snapshot}: not a study's snapshot ({_first_line(error)})"
                ) from None
        storage = open_storage(f"journal:{copy}", create=False)
        names = study_names(storage)
        if len(names) != 1:
            raise StorageError(f"{study_dir}: its journal holds {len(names)} studies, not one")
        study = load_study(storage, names.pop())
        identity = study.user_attrs.get("identity")
        if not isinstance(identity, dict):
            raise StorageError(f"{study_dir}: its study stores no identity (not a tune study)")
        history = study.user_attrs.get(PROTOCOL_HISTORY_ATTR, [])
        if not isinstance(history, list):
            raise StorageError(f"{study_dir}: its stored protocol_history is not a list")
        return study.get_trials(deepcopy=False), identity, list(history)
