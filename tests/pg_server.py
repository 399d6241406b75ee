"""A throwaway PostgreSQL cluster for the history tests: initdb into a temp dir, pg_ctl start on a free port
of 127.0.0.1, stopped and removed at teardown. Skips (with the reason) when Debian's binaries or psycopg
are absent; .ci/run installs the ``postgresql`` package so CI runs these tests."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest


def _bindir() -> str | None:
    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin"):
        for d in sorted(glob.glob(pattern), reverse=True):
            if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
                return d
    found = shutil.which("initdb")
    return os.path.dirname(found) if found and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user() -> list[str]:
    """initdb refuses root: run the server as the ``postgres`` system user there."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as")
    return ["runuser", "-u", "postgres", "--"]


def cluster() -> Iterator[str]:
    """Yields the server's base URL (database ``postgres``, user ``commscope``, trust auth on 127.0.0.1)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'commscope[postgres]')")
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are absent: apt-get install postgresql")
    runas = _as_user()
    root = tempfile.mkdtemp(prefix="commscope-pg-")
    os.chmod(root, 0o755)
    data = os.path.join(root, "data")
    if runas:
        shutil.chown(root, "postgres")
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run([*runas, f"{bindir}/initdb", "-D", data, "-U", "commscope", "--auth=trust", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, env=env, timeout=120)
        subprocess.run([*runas, f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(root, "log"), "-w", "-t", "60",
                        "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, env=env, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log = ""
        if os.path.exists(os.path.join(root, "log")):
            log = open(os.path.join(root, "log")).read()[-2000:]
        shutil.rmtree(root, ignore_errors=True)
        out = getattr(exc, "stderr", b"") or b""
        pytest.fail(f"could not start PostgreSQL: {exc}: {out.decode(errors='replace')[-2000:]} {log}")
    try:
        yield f"postgresql://commscope@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*runas, f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"], capture_output=True,
                       timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(base_url: str) -> str:
    """A new empty database on the cluster: each test gets its own store."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return base_url.rsplit("/", 1)[0] + "/" + name
