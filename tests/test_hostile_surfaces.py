"""Issue #42's probe, class by class, as tests: the surfaces added around the analysis (secrets, stores, thresholds,
options, limits, op-table meta YAML, the web apps) probed as an attacker and a careless CI would. Each case must
give one clear line and exit 2, or the right result: no password in any output or log line, no run reported stored
that is not, no hang (FIFOs run in a subprocess under a timeout), no traceback, no 500.

The caches are probed in ``test_cache_proof.py``, the history store's four concurrent writers in
``test_history_store.py``, and the trace-side cases (step markers, rank numbers) in the hostile corpus."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.redact import MASK, redact, remember, secrets_in_url
from sample_traces.optable_gen import Job, write
from tests import pg_server
from tests.helpers import ROOT

SAMPLES = ROOT / "sample_traces" / "gpu_h200"
BALANCED, HOST = SAMPLES / "ddp_balanced", SAMPLES / "host_straggler"
SECRET = "Sup3rSecretPw"


def cli(*args: object, env: dict | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=True)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.stdout, res.stderr


def cli_process(*args: object, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    """In a subprocess under a timeout: the cases that used to hang (a FIFO)."""
    return subprocess.run([sys.executable, "-m", "analyzer.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_line(code: int, err: str, *expect: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    for e in expect:
        assert e in lines[0], (e, lines[0])


# ---------------------------------------------------------------------------------------------- secrets

URL_FORMS = [
    f"postgresql://ci:{SECRET}@db.example:5432/hist",
    f"postgresql://ci:{SECRET[:4]}@{SECRET[4:]}@db.example/hist",  # an '@' in the password
    f"postgresql://:{SECRET}@db.example/hist",  # empty user
    f"postgresql://ci@db.example/hist?password={SECRET}&sslmode=disable",
    f"postgres://ci:{SECRET}@[::1/hist",  # malformed: the driver would repeat it
    f"postgresql://ci:{SECRET}@db.example:5a/hist",
    f"postgresql://ci:pa/{SECRET}@db.example/hist",  # a '/' in the password
]


@pytest.mark.parametrize("url", URL_FORMS)
def test_redaction_removes_every_url_form(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # secrets remembered by earlier tests of the session ("secret" of a store URL) would mask words here
    monkeypatch.setattr("analyzer.redact._secrets", set())
    assert SECRET not in redact(f"added run x to {url}") and MASK in redact(url)
    assert SECRET[4:] not in redact(url)
    assert redact("host=db password='a b' dbname=x") == "host=db password=*** dbname=x"
    assert redact("no secrets: /data/rank0.json, a=b") == "no secrets: /data/rank0.json, a=b"


def test_reports_keep_their_scripts_whole() -> None:
    """An HTML report embeds plotly.js (``this.pass=a``, URLs with '@'): the redaction leaves scripts whole, so
    every report of a real run is exactly the renderer's; text outside them is still redacted."""
    from analyzer.redact import redact_document
    from analyzer.report import render
    from tests.helpers import run

    a = run(BALANCED)
    for fmt in ("html", "json", "markdown", "text"):
        text = render(a, fmt)
        assert redact_document(text) == text, fmt
    page = f"<!DOCTYPE html><p>{URL_FORMS[0]}</p><script>this.pass=a;u='x://a:b@c'</script>"
    assert redact_document(page) == ("<!DOCTYPE html><p>postgresql://ci:***@db.example:5432/hist</p>"
                                     "<script>this.pass=a;u='x://a:b@c'</script>")


def test_remembered_secrets_go_in_any_form() -> None:
    remember("p%40ss-wordy")
    assert redact("connection to 'p@ss-wordy' failed; p%40ss-wordy") == "connection to '***' failed; ***"
    assert secrets_in_url(f"postgresql://u:{SECRET}@h/db?password=two") == [SECRET, "two"]


@pytest.mark.parametrize("url", URL_FORMS)
def test_no_password_when_the_store_cannot_be_reached(url: str) -> None:
    url = url.replace("db.example", "127.0.0.1:1").replace(":1:5432", ":1").replace(":1:5a", ":5a")
    code, out, err = cli("history", "add", BALANCED, "--store", url, "-j", "1")
    one_line(code, err)
    assert SECRET not in out + err and SECRET[4:] not in out + err


def test_a_secret_error_line_of_a_bug_is_redacted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug's traceback (exit 1) still shows, with the password masked."""
    from analyzer.history import record

    def boom(target: str, create: bool) -> None:
        raise RuntimeError(f"unexpected while opening {target}")

    monkeypatch.setattr(record, "check", boom)
    code, out, err = cli("history", "add", BALANCED, "--store", URL_FORMS[0], "-j", "1")
    assert code == 1 and "Traceback" in err and "RuntimeError" in err and SECRET not in err


@pytest.fixture(scope="module")
def pg_cluster():
    yield from pg_server.cluster()


def test_no_password_in_any_output_of_a_reachable_store(pg_cluster: str, tmp_path: Path) -> None:
    """Trust auth ignores the password, so the URL with one connects: every line, the stored run, the trend and
    the history page must still not show it."""
    base = pg_server.fresh_database(pg_cluster)
    url = base.replace("postgresql://commscope@", f"postgresql://commscope:{SECRET}@")
    env = {"PGPASSWORD": "EnvSecret42"}
    code, out, err = cli("history", "add", BALANCED, "--store", url, "--run", "r1", "--label", f"db={url}", "-j", "1",
                         env=env)
    assert code == 0, err
    assert out.strip() == f"added run r1 to {redact(url)}" and SECRET not in out + err
    code, out, err = cli("analyze", HOST, "--history", url, "--run", "r2", "--format", "json", "-j", "1", env=env)
    assert code == 0 and SECRET not in out + err and f"added run r2 to {redact(url)}" in err
    for fmt in ("text", "json", "markdown", "html"):
        code, out, err = cli("history", "trend", "--store", url, "--format", fmt)
        assert code == 0 and SECRET not in out + err
    import psycopg

    with psycopg.connect(base) as conn:
        stored = " ".join(str(v) for row in conn.execute("SELECT * FROM commscope_runs") for v in row)
        stored += " ".join(str(v) for row in conn.execute("SELECT * FROM commscope_labels") for v in row)
    assert "r1" in stored and SECRET not in stored and MASK in stored
    from dashboards.history import create_app

    client = create_app(url).server.test_client()
    for path in ("/", "/_dash-layout", "/run/r1", "/run/nope"):
        body = client.get(path).get_data(as_text=True)
        assert SECRET not in body and "EnvSecret42" not in body


# ---------------------------------------------------------------------------------------------- stores


@pytest.mark.parametrize("store", [":memory:", "file:x.sqlite?mode=memory", "sqlite:///:memory:",
                                   "file:/tmp/x.sqlite", "", "   "])
def test_a_store_that_keeps_nothing_is_refused(store: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("history", "add", BALANCED, "--store", store, "-j", "1")
    one_line(code, err, "keeps nothing" if store.strip() else "is empty")
    assert "added run" not in out + err and not list(tmp_path.iterdir())
    code, out, err = cli("analyze", BALANCED, "--history", store, "-j", "1")
    one_line(code, err)
    assert not out and not list(tmp_path.iterdir())  # refused before the analysis: no report, no run dropped


def test_an_empty_history_variable_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("history", "add", BALANCED, "-j", "1", env={"COMMSCOPE_HISTORY": ""})
    one_line(code, err, "COMMSCOPE_HISTORY is set but empty")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind", ["fifo", "/dev/null", "/dev/zero", "folder"])
def test_a_store_that_is_no_file_is_refused_without_reading(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "store"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    else:
        target = Path(kind)
    for cmd in (["history", "add", BALANCED, "--store", target, "-j", "1"], ["history", "trend", "--store", target],
                ["analyze", BALANCED, "--history", target, "-j", "1"]):
        res = cli_process(*cmd, timeout=60)
        one_line(res.returncode, res.stderr, str(target))


def _store_with_version(path: Path, version: str) -> bytes:
    from analyzer.history.store import Store

    Store.open(str(path)).close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = DELETE")  # the bytes on disk are the whole store
    con.execute("UPDATE commscope_meta SET value = ? WHERE key = 'schema_version'", (version,))
    con.commit()
    con.close()
    return path.read_bytes()


@pytest.mark.parametrize("version, expect", [("9", "newer commscope"), ("99999999999999999999", "damaged"),
                                             ("-1", "damaged"), ("1e400", "damaged"), ("abc", "damaged"),
                                             ("²", "damaged"), ("0", "damaged")])
def test_a_store_of_another_version_is_refused_before_any_write(version: str, expect: str, tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    before = _store_with_version(path, version)
    code, out, err = cli("history", "trend", "--store", path)
    one_line(code, err, expect)
    code, out, err = cli("history", "add", BALANCED, "--store", path, "-j", "1")
    one_line(code, err, expect)
    assert path.read_bytes() == before  # not one byte: the WAL pragma used to rewrite the header first
    assert not Path(str(path) + "-wal").exists()


# ---------------------------------------------------------------------------------------------- thresholds


@pytest.mark.parametrize("text, expect", [
    ("min_effect_pct_of_step = nan\n", "min_effect_pct_of_step"),
    ("min_effect_pct_of_step = inf\n", "min_effect_pct_of_step"),
    ("min_effect_pct_of_step = 1e400\n", "min_effect_pct_of_step"),
    ("[fail_on]\nstep_time_ms = nan\n", "finite"),
    ("[fail_on]\nexposed_comm_ms = -inf\n", "finite"),
    ("[fail_on]\nstep_time_ms = \"+٣%\"\n", r"expected \+N%"),
    ("confidence = nan\n", "confidence"),
    ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("[fail_on]\nunknown_metric = \"+5%\"\n", "unknown metric"),
])
def test_a_thresholds_file_cannot_switch_the_gate_off(text: str, expect: str, tmp_path: Path) -> None:
    from analyzer.compare import thresholds
    from analyzer.errors import UsageError

    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=expect):
        thresholds.build((), path)


def test_nan_thresholds_no_longer_pass_a_regressed_run(tmp_path: Path) -> None:
    """The probe's case: under the defaults HOST regresses against BALANCED (exit 1); a nan in the file used to
    make it pass (exit 0). It is refused now (exit 2)."""
    code, out, err = cli("compare", BALANCED, HOST, "-j", "1")
    assert code == 1, err
    path = tmp_path / "t.toml"
    path.write_text("min_effect_pct_of_step = nan\n")
    code, out, err = cli("compare", BALANCED, HOST, "--thresholds", path, "-j", "1")
    one_line(code, err, str(path))


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "big"])
def test_a_thresholds_file_that_is_no_small_file_is_refused(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "big":
        path.write_text("# padding\n" * 200_000)
    else:
        path = Path(kind)
    res = cli_process("compare", BALANCED, HOST, "--thresholds", path, "-j", "1")
    one_line(res.returncode, res.stderr, str(path))


# ---------------------------------------------------------------------------------------------- options and limits


@pytest.mark.parametrize("args, expect", [
    (["--layout", "tp=²"], "expected AXIS=N"),
    (["--layout", "tp=٣"], "expected AXIS=N"),
    (["--layout", "tp=2,tp=4"], "given twice"),
    (["--layout", "tp=65536,dp=65536"], "--max-ranks"),
    (["--rank-map", "x.json=²"], "expected FILE=RANK"),
    (["--rank-map", "x.json=3000000000"], "--max-ranks"),
    (["--step-marker", "(?<=iter-)(\\d+)"], "look-around"),
    (["--step-marker", "(a)\\1"], "backreferences"),
    (["--step-marker", "a{1000}{1000}"], "size limit"),
])
def test_options_are_one_line(args: list[str], expect: str) -> None:
    code, out, err = cli("analyze", BALANCED, "--no-cache", "-j", "1", *args)
    assert code == 2 and "Traceback" not in err and expect in err, err
    assert len([ln for ln in err.strip().splitlines() if ln.startswith(("commscope: error", "Error"))]) == 1


def test_a_huge_declared_world_is_counted_not_built() -> None:
    from types import SimpleNamespace

    from analyzer.compare.gate import _incomplete

    (line,) = _incomplete("NEW", SimpleNamespace(source={"ranks": [0, 1, 2, 3], "declared_world_size": 3 * 10**9}),
                          None)
    assert line == "NEW analyzed 4 of 3000000000 declared ranks (missing rank(s) 4-67 and 2,999,999,932 more)"
    (line,) = _incomplete("NEW", SimpleNamespace(source={"ranks": [0, 1, 3], "declared_world_size": 8}), (0, 1, 2, 3))
    assert line == "NEW analyzed 3 of 8 declared ranks (missing rank(s) 2)"


# ---------------------------------------------------------------------------------------------- op-table meta YAML

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)) + "dp_size: 2\n"


@pytest.mark.parametrize("meta, expect", [
    (LAUGHS, "anchors or aliases"),
    ("dp_size: " + "[" * 10_000 + "]" * 10_000 + "\n", "nests deeper"),
    ("dp_size: 1000000\npp_size: 1000000\n", "--max-ranks"),
    ("dp_size: 2\n" + "x: 1\n" * 200_000, "events"),
])
def test_op_table_meta_yaml_is_bounded(meta: str, expect: str, tmp_path: Path) -> None:
    trace = write(Job(dp=2, pp=2, microbatches=2, steps=2), tmp_path)  # an op table and its meta-gen.yaml
    (tmp_path / "meta-gen.yaml").write_text(meta)
    code, out, err = cli("analyze", trace, "--no-cache", "-j", "1")
    one_line(code, err, expect)


def test_op_table_meta_fifo_is_refused(tmp_path: Path) -> None:
    trace = write(Job(dp=2, pp=2, microbatches=2, steps=2), tmp_path)
    (tmp_path / "meta-gen.yaml").unlink()
    os.mkfifo(tmp_path / "meta-gen.yaml")
    res = cli_process("analyze", trace, "--no-cache", "-j", "1")
    one_line(res.returncode, res.stderr, "meta")


# ---------------------------------------------------------------------------------------------- web apps


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from analyzer.cli.compose import dashboard_app, history_app
    from analyzer.history.record import add
    from dashboards.hang import create_hang_app
    from tests.helpers import run

    store = tmp_path_factory.mktemp("h") / "h.sqlite"
    add(str(store), run(BALANCED), "r1")
    from analyzer.hangs.analysis import triage

    dumps = ROOT / "sample_traces" / "flight_recorder" / "skip" / "json"
    hang = triage([dumps], {}) if dumps.exists() else None
    out = {"analysis": dashboard_app(run(BALANCED)), "history": history_app(str(store))}
    if hang is not None:
        out["hang"] = create_hang_app(hang)
    return out


@pytest.mark.parametrize("name", ["analysis", "history", "hang"])
def test_every_app_is_guarded(name: str, apps: dict, caplog: pytest.LogCaptureFixture) -> None:
    if name not in apps:
        pytest.skip("no Flight Recorder sample to build the hang page from")
    client = apps[name].server.test_client()
    caplog.set_level(logging.INFO)
    assert client.get("/").status_code == 200
    for path in ("/nope", "/admin/../etc/passwd", "/_dash-component-suites/nope/x.js",
                 "/_dash-component-suites/dash/nope.js"):
        assert client.get(path).status_code == 404, path
    post = "/_dash-update-component"
    assert client.post(post, data=b"{", content_type="application/json").status_code == 400
    assert client.post(post, json={"output": "x.y", "inputs": []}).status_code == 400
    assert client.post(post, json={"nothing": 1}).status_code == 400
    assert client.post(post, data=b"x" * (50 << 20), content_type="application/json").status_code == 413
    assert "Traceback" not in caplog.text
