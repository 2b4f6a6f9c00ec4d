"""Any text file or folder of files, optionally gzip-compressed, read as bytes (vocab 256)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from torch_mars.data.corpus import DataFormatError, TokenCorpus


def read_maybe_gzip(path: Path, content: str = "text file") -> bytes:
    """The bytes of ``path``, decompressed when its name ends in ``.gz``; ``content`` names what
    the file should hold, for the error messages."""
    if not path.is_file():
        raise DataFormatError(path, "no such file", f"a {content} or a .gz of one")
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        return gzip.decompress(path.read_bytes())
    except EOFError as error:
        raise DataFormatError(
            path, "the gzip stream ends early (truncated file)", "a complete .gz file"
        ) from error
    except (gzip.BadGzipFile, zlib.error) as error:
        raise DataFormatError(
            path, f"not a valid gzip file ({error})", f"a gzip-compressed {content}"
        ) from error


class TextCorpus(TokenCorpus):
    """Bytes of a text file, or of every regular file in a folder (recursively, sorted by
    path, hidden files skipped); ``.gz`` files are decompressed. The last ``val_fraction`` of the
    bytes is the validation split.

    Args:
        path: a file or a folder.
        val_fraction: share of the bytes held out for validation, in (0, 1).

    Raises:
        DataFormatError: a missing path, an empty corpus, a truncated or invalid ``.gz``, or a
            corpus too short to split.
    """

    def __init__(self, path: str | Path, val_fraction: float = 0.05) -> None:
        path = Path(path)
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if path.is_dir():
            files = [
                file
                for file in sorted(path.rglob("*"))
                if file.is_file()
                and not any(part.startswith(".") for part in file.relative_to(path).parts)
            ]
            if not files:
                raise DataFormatError(path, "the folder has no files", "text files or .gz files")
        elif path.exists():
            files = [path]
        else:
            raise DataFormatError(path, "no such file or folder", "a text file or a folder")
        data = b"".join(read_maybe_gzip(file) for file in files)
        if not data:
            raise DataFormatError(path, "the corpus is empty", "at least a few bytes of text")
        n_val = int(len(data) * val_fraction)
        if n_val < 2 or len(data) - n_val < 2:
            raise DataFormatError(
                path,
                f"only {len(data)} bytes",
                f"enough bytes for both splits at val_fraction={val_fraction}",
            )
        tokens = np.frombuffer(data, dtype=np.uint8)
        super().__init__(tokens[:-n_val], tokens[-n_val:], 256, str(path))
