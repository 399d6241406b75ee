"""What a cache entry records to prove its files: their SHA-256 (hashlib, with the CPU's SHA extensions where it
has them: ~1.7 GB/s a core here). A file is opened once, checked to be a regular file on its descriptor (a FIFO or
a device put in its place would block or never end), and read whole when small (most: 1,024 small ranks are
4,096 files of a few kB) or through one 1 MiB buffer when big (memory bounded; a mapping would turn a file
truncated meanwhile into SIGBUS); big files are hashed on threads (hashlib releases the GIL)."""

from __future__ import annotations

import hashlib
import os
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

_BUFFER = 1 << 20  # files up to this are read in one call; bigger ones through a buffer of this size
_THREADED = 8 << 20  # a file this big is hashed on a thread while the next ones are opened


def open_regular(path: Path | str, limit: int | None = None):  # noqa: ANN201 - a binary file object
    """``path`` opened for reading when it is a regular file (of at most ``limit`` bytes). Checked on the open
    descriptor (no race); OSError otherwise."""
    fd = _open(path, limit)[0]
    return os.fdopen(fd, "rb", buffering=0)


def _open(path: Path | str, limit: int | None = None) -> tuple[int, int]:
    """(descriptor, size) of a regular file opened for reading; OSError for anything else or past ``limit``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if limit is not None and st.st_size > limit:
            raise OSError(f"{path}: larger than {limit} bytes")
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def _read_all(fd: int, size: int) -> bytes:
    """The whole file: one read where it has the size fstat gave (a short read of a regular file is its end; a
    file that grew since has other bytes than those recorded anyway), more reads where it was cut short."""
    first = os.read(fd, size + 1)
    if len(first) <= size and (len(first) == size or not first):
        return first
    parts = [first]
    while chunk := os.read(fd, 1 << 20):
        parts.append(chunk)
    return b"".join(parts)


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    fd, size = _open(path, limit)
    try:
        return _read_all(fd, size)[: limit]
    finally:
        os.close(fd)


def _hash_fd(fd: int, size: int) -> str:
    """The digest of an open file, closing it."""
    try:
        if size <= _BUFFER:
            return hashlib.sha256(_read_all(fd, size)).hexdigest()
        h = hashlib.sha256()
        buf = bytearray(_BUFFER)
        view = memoryview(buf)
        while n := os.readv(fd, [buf]):
            h.update(view[:n])
        return h.hexdigest()
    finally:
        os.close(fd)


def file_digest(path: Path | str) -> str:
    """The file's SHA-256 (hex). Raises OSError where it cannot be read or is no regular file."""
    return _hash_fd(*_open(path))


def files_digests(paths: list[Path] | list[str]) -> list[str | None]:
    """Each file's digest (None where it cannot be read or is no regular file), big files on threads."""
    out: list[str | Future | None] = []
    pool: ThreadPoolExecutor | None = None
    try:
        for p in paths:
            try:
                fd, size = _open(p)
            except OSError:
                out.append(None)
                continue
            if size >= _THREADED and len(paths) > 1:
                pool = pool or ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
                out.append(pool.submit(_hash_fd, fd, size))
            else:
                try:
                    out.append(_hash_fd(fd, size))
                except OSError:
                    out.append(None)
        return [_result(x) for x in out]
    finally:
        if pool is not None:
            pool.shutdown()


def _result(x: str | Future | None) -> str | None:
    if isinstance(x, Future):
        try:
            return x.result()
        except OSError:
            return None
    return x


def code(pkg: Path, libs: tuple[str, ...], seed: str = "") -> str:
    """The SHA-256 of every source file under ``pkg`` (Python and the C of its extensions, by path) and the
    installed versions of ``libs``: what a cached result computed by that code with those libraries depends on."""
    from importlib import metadata  # (only where a cache key is made)

    h = hashlib.sha256(seed.encode())
    for path in sorted((*pkg.rglob("*.py"), *pkg.rglob("*.c"))):
        h.update(str(path.relative_to(pkg)).encode() + b"\0" + path.read_bytes() + b"\0")
    for lib in libs:
        try:
            h.update(f"{lib}={metadata.version(lib)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none\0".encode())
    return h.hexdigest()
