"""The two backends' differences, and nothing else: connecting, placeholders, the serial key, write locks, bulk load.

Every statement is written once, with ``?`` placeholders and ``{serial}`` for the auto-increment key;
``Dialect.sql`` turns it into the backend's form. The store (store.py) holds all the SQL.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import StoreError
from ..redact import redact, remember

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 60.0  # a CI job waits this long for another job's write before giving up
LOCK_KEY = 0x636F6D6D  # pg_advisory_xact_lock key for migrations ("comm")


def is_url(target: str) -> bool:
    return bool(re.match(r"^postgres(ql)?://", target))


PASSWORD_HINT = "leave the password out of the URL: PGPASSWORD, ~/.pgpass or a service file (libpq reads them)"


def split_password(url: str) -> tuple[str, str | None]:
    """The URL without its password (user information or ``password=`` parameter) and the password, decoded.

    The driver gets the password apart from the URL, so that no message of its own (libpq repeats a URL it
    cannot parse) can hold it; both forms are remembered for the redaction. A URL that cannot be split
    unambiguously is refused here, before the driver sees it.
    """
    try:
        parts = urlsplit(url)  # ports are left to libpq (it takes host lists: h1:5432,h2:5432)
    except ValueError as exc:
        raise StoreError(f"{redact(url)}: not a valid PostgreSQL URL ({exc})") from None
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if "@" in userinfo:
        raise StoreError(f"{redact(url)}: the URL holds more than one '@' before its host; percent-encode an '@' "
                         f"in the password as %40, or better {PASSWORD_HINT}")
    user, _, raw = userinfo.partition(":")
    passwords = [unquote(raw)] if raw else []
    kept = []
    for item in parts.query.split("&") if parts.query else []:
        key, _, value = item.partition("=")
        if unquote(key).strip().lower() == "password":
            passwords.append(unquote(value))
        else:
            kept.append(item)
    remember(raw, *passwords)
    if len(set(passwords)) > 1:
        raise StoreError(f"{redact(url)}: the URL gives two different passwords; {PASSWORD_HINT}")
    netloc = (f"{user}@" if user else "") + hostport
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), parts.fragment)), (
        passwords[0] if passwords else None)


# names SQLite would open as a database that keeps nothing on disk (or as a URI of its own)
_NOT_A_FILE = re.compile(r"^(:memory:|file:)|[?&]mode=memory\b", re.IGNORECASE)


def sqlite_path(target: str) -> Path:
    """The file of an SQLite store; in-memory names, URIs and empty values are refused (they would keep nothing:
    a run reported stored would be gone when the command ends)."""
    name = target.removeprefix("sqlite:///")
    if not name.strip():
        raise StoreError("the history store is empty (an unset variable?): give --store PATH (an SQLite file) or a "
                         "postgresql:// URL")
    if _NOT_A_FILE.search(name):
        raise StoreError(f"{name}: an in-memory or URI database keeps nothing when commscope exits; give a file "
                         "path or a postgresql:// URL")
    return Path(name).expanduser()


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def _head(path: Path) -> bytes:
    """The first 16 bytes of a regular file; anything else (a FIFO would block the read) is refused. Opened
    without blocking and checked on the open descriptor: no race between the check and the read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise StoreError(f"{path}: is a folder, not a history store (give a file path or a postgresql:// URL)")
        if not stat.S_ISREG(mode):
            raise StoreError(f"{path}: is {_kind(mode)}, not a history store (give a file path or a postgresql:// URL)")
        return os.read(fd, 16)
    finally:
        os.close(fd)


class Dialect:
    name = ""
    serial = ""
    error: type[Exception] = Exception  # the driver's base error
    integrity: type[Exception] = Exception

    def sql(self, q: str) -> str:
        return q.replace("{serial}", self.serial)

    @contextmanager
    def write(self, conn: Any) -> Iterator[None]:
        raise NotImplementedError

    def insert_many(self, conn: Any, table: str, cols: Sequence[str], rows: list[tuple]) -> None:
        raise NotImplementedError

    def tables(self, conn: Any) -> set[str]:
        raise NotImplementedError


class SQLite(Dialect):
    name = "sqlite"
    serial = "seq INTEGER PRIMARY KEY AUTOINCREMENT"
    error = sqlite3.Error
    integrity = sqlite3.IntegrityError

    @staticmethod
    def connect(path: Path, create: bool) -> sqlite3.Connection:
        """Refuse what is not an SQLite file before SQLite touches it (it would not write to it, but the
        message would be 'file is not a database'); FIFOs and devices are refused without reading them."""
        if path.exists():
            head = _head(path)
            if head and head != SQLITE_MAGIC:
                raise StoreError(f"{path}: not a commscope history store (not an SQLite database); "
                                 "give another --store path or a postgresql:// URL")
        elif not create:
            raise StoreError(f"{path}: no history store here (add a run first: commscope history add PATH "
                             "--store ...), or set --store / $COMMSCOPE_HISTORY")
        elif not path.parent.is_dir():
            raise StoreError(f"{path}: folder {path.parent} does not exist (create it, or give another --store)")
        # the path as a URI of our own making: SQLite never reads a name the user gave as a URI or ':memory:'
        uri = f"file:{quote(os.path.abspath(path))}?mode={'rwc' if create else 'rw'}"
        # autocommit: transactions are explicit (BEGIN IMMEDIATE), so writers queue on the busy timeout
        return sqlite3.connect(uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True)

    @staticmethod
    def tune(conn: sqlite3.Connection) -> None:
        """WAL: readers never block the writer and concurrent jobs' writes queue; only on our own store.
        synchronous=NORMAL is WAL's recommended level: a crash of the process or the machine never corrupts
        the store; a power loss may drop the last added run (not half of it)."""
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")

    @contextmanager
    def write(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock now: no upgrade deadlock between two writers
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def insert_many(self, conn: sqlite3.Connection, table: str, cols: Sequence[str], rows: list[tuple]) -> None:
        conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)

    def tables(self, conn: sqlite3.Connection) -> set[str]:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


class Postgres(Dialect):
    name = "postgresql"
    serial = "seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    def __init__(self) -> None:
        import psycopg

        self.error = psycopg.Error
        self.integrity = psycopg.errors.IntegrityError

    def sql(self, q: str) -> str:
        return super().sql(q).replace("?", "%s")

    @staticmethod
    def connect(url: str) -> Any:
        try:
            import psycopg
        except ImportError:
            raise StoreError(f"{redact(url)}: PostgreSQL stores need psycopg (pip install 'commscope[postgres]')"
                             ) from None
        bare, password = split_password(url)
        try:
            return psycopg.connect(bare, autocommit=True, connect_timeout=10,
                                   **({"password": password} if password is not None else {}))
        except psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"{redact(url)}: cannot connect to the history database: {first}") from None

    @contextmanager
    def write(self, conn: Any) -> Iterator[None]:
        with conn.transaction():
            yield

    @staticmethod
    def lock(conn: Any) -> None:
        """Serialize migrations between processes (held to the end of the transaction)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))

    def insert_many(self, conn: Any, table: str, cols: Sequence[str], rows: list[tuple]) -> None:
        # COPY: one round trip for tens of thousands of rows (executemany would send each)
        with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)

    def tables(self, conn: Any) -> set[str]:
        rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        return {r[0] for r in rows}
