"""Run the examples of README.md and docs/ and compare what they print with what the page shows.

Conventions of the pages (docs/contributing.md explains them to writers):

- ```` ```console ````: ``$ command`` lines, each followed by its expected output (stdout and stderr as a
  terminal shows them; a command that exits non-zero ends with ``[exit N]``). A line that is exactly ``...``
  stands for any number of lines (the page shows a head and a tail; a refresh keeps their lengths).
- ```` ```bash ```` (``sh``, ``shell``): commands only; each must exit 0.
- ```` ```pycon ````: ``>>>`` / ``...`` statements with their expected output, as the interpreter prints it.
- ```` ```python ````: a script; it must not raise.
- A block with ``title="NAME"`` (``toml``, ``yaml``, ...) is written to the file NAME before the blocks after it run.
- ``<!-- docs-test: skip REASON -->`` on the line before a block: not run (an install, the whole test suite);
  ``<!-- docs-test: parse -->``: each ``commscope`` command is parsed by the click app, not run (a server).

Each page runs top to bottom in a fresh folder of its own holding a link to ``sample_traces/``; its Python
blocks share one namespace. Volatile bits (timings, run IDs, dates, the folder's path) are masked on both sides
before comparing, so the comparison is exact otherwise. ``python -m pytest tests/test_docs.py --update-docs``
rewrites every shown output from a fresh run (after a change of behaviour is merged).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLS = {"bash", "sh", "shell"}
ELLIPSIS = "..."
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)(?P<attrs>.*)$")
_MARK = re.compile(r"<!--\s*docs-test:\s*(?P<what>\w+)\s*(?P<why>.*?)\s*-->")
_TITLE = re.compile(r'title="(?P<name>[^"]+)"')

# (pattern, replacement): what changes from run to run and says nothing about commscope's answer
MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b\d{8}T\d{6}Z-[0-9a-f]{6}\b"), "<run-id>"),  # default history run IDs: UTC time + random
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(\+00:00|Z)?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms) (wall|elapsed)\b"), "<elapsed>"),
    (re.compile(r"\bin \d+(\.\d+)? s\b"), "in <elapsed>"),
    (re.compile(r"(commscope[ ,]+(version )?)\d+\.\d+\.\d+\S*"), r"\g<1><version>"),
]


@dataclass
class Block:
    """One fenced block: where it sits in the page (0-based line numbers of its body) and what it holds."""

    lang: str
    body: list[str]
    start: int  # first body line
    end: int  # the closing fence
    indent: str
    mark: str | None = None
    why: str = ""
    title: str | None = None


@dataclass
class Result:
    """What running a page found: failures (empty: every example ran and matched) and refreshed bodies."""

    failures: list[str] = field(default_factory=list)
    bodies: dict[int, list[str]] = field(default_factory=dict)  # Block.start -> the body with fresh outputs


def blocks(text: str) -> list[Block]:
    lines = text.split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and lines[j].strip().strip(fence[0]) == ""):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = _MARK.search(lines[k]) if k >= 0 else None
        title = _TITLE.search(m["attrs"])
        out.append(Block(m["lang"].lower(), body, i + 1, j, indent, mark["what"] if mark else None,
                         mark["why"] if mark else "", title["name"] if title else None))
        i = j + 1
    return out


def unplace(text: str, workdir: Path | None = None) -> str:
    """The output with the page's folder and the checkout left out of paths (what the page shows)."""
    if workdir is not None:
        text = text.replace(str(workdir.resolve()) + "/", "").replace(str(workdir) + "/", "")
    return text.replace(str(ROOT) + "/", "")


def mask(text: str, workdir: Path | None = None) -> str:
    """What is compared: the volatile bits replaced on both sides."""
    text = unplace(text, workdir)
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


def environment(cache_dir: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"COMMSCOPE_HISTORY", "GITHUB_STEP_SUMMARY", "NO_COLOR", "FORCE_COLOR"}}
    env.update({"COLUMNS": "100", "LINES": "50", "TZ": "UTC", "PYTHONUNBUFFERED": "1", "TERM": "dumb",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    if cache_dir:
        env["COMMSCOPE_CACHE_DIR"] = cache_dir
    return env


def _commands(body: list[str], prompt: bool) -> list[tuple[str, list[str]]]:
    """(command, expected output lines): ``$ `` lines of a console block, or every line of a shell block
    (continuations joined, comments and blank lines skipped)."""
    out: list[tuple[str, list[str]]] = []
    lines = iter(body)
    for line in lines:
        if prompt and not line.startswith("$ "):
            if out:
                out[-1][1].append(line)
            continue
        cmd = line[2:] if prompt else line
        if not prompt and (not cmd.strip() or cmd.lstrip().startswith("#")):
            continue
        while cmd.endswith("\\"):
            cmd = cmd[:-1] + "\n" + next(lines, "").removeprefix("> ")
        out.append((cmd, []))
    return out


def run_shell(cmd: str, workdir: Path, env: dict[str, str]) -> str:
    r = subprocess.run(["bash", "-c", cmd], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, text=True, timeout=300)
    out = r.stdout.rstrip("\n")
    if r.returncode:
        out += ("\n" if out else "") + f"[exit {r.returncode}]"
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line for line; a lone ``...`` in expected stands for any number of lines."""
    if ELLIPSIS not in expected:
        return expected == actual
    k = expected.index(ELLIPSIS)
    head, tail = expected[:k], expected[k + 1:]
    if len(head) + len(tail) > len(actual) or actual[:len(head)] != head:
        return False
    return matches(tail, actual[len(actual) - len(tail):]) if ELLIPSIS in tail else \
        actual[len(actual) - len(tail):] == tail


def refreshed(expected: list[str], actual: list[str]) -> list[str]:
    """The fresh output shown as the page showed the old one: the same head and tail around ``...``."""
    if ELLIPSIS not in expected:
        return actual
    k = expected.index(ELLIPSIS)
    head, tail = k, len(expected) - k - 1
    if head + tail >= len(actual):
        return actual
    return actual[:head] + [ELLIPSIS] + (actual[len(actual) - tail:] if tail else [])


def parse_only(cmd: str) -> str | None:
    """Parse each ``commscope`` command of a line with the click app (no run); an error message, or None."""
    import click

    from analyzer.cli.app import main

    for part in re.split(r"&&|\|\||;|\|", cmd):
        args = shlex.split(part, comments=True)
        if not args or args[0] != "commscope":
            continue
        try:
            ctx = main.make_context("commscope", args[1:])
            group: click.Command = main
            rest = ctx.protected_args + ctx.args
            while isinstance(group, click.Group) and rest:
                name, sub, rest = group.resolve_command(ctx, rest)
                ctx = sub.make_context(name, rest, parent=ctx)
                group, rest = sub, ctx.protected_args + ctx.args
        except click.ClickException as exc:
            return f"{part.strip()!r}: {exc.format_message()}"
    return None


def _statements(body: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in body:
        if line.startswith(">>> ") or line == ">>>":
            out.append((line[4:], []))
        elif (line.startswith("... ") or line == "...") and out and not out[-1][1]:
            out[-1] = (out[-1][0] + "\n" + line[4:], [])
        elif out:
            out[-1][1].append(line)
    return out


def run_python(source: str, namespace: dict, interactive: bool) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            code = compile(source, "<docs>", "single" if interactive else "exec")
            exec(code, namespace)
        except Exception:
            etype, value, tb = sys.exc_info()
            lines = traceback.format_exception_only(etype, value)
            print("Traceback (most recent call last):\n" + "".join(lines).rstrip("\n"))
    return buf.getvalue().rstrip("\n")


def run_page(path: Path, workdir: Path, cache_dir: str | None) -> Result:
    """Run every example of one page in ``workdir`` (fresh, with ``sample_traces`` linked into it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "sample_traces").symlink_to(ROOT / "sample_traces")
    env = environment(cache_dir)
    namespace: dict = {"__name__": "__docs__"}
    res = Result()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    old_cwd = os.getcwd()
    os.chdir(workdir)  # Python examples use paths relative to the page's folder, as the shell ones do
    try:
        for b in blocks(path.read_text()):
            line = b.start  # 0-based first body line; shown 1-based as the fence's line
            if b.title and b.lang not in SHELLS | {"console", "python", "pycon"}:
                (workdir / b.title).write_text("\n".join(b.body) + "\n")
                continue
            if b.mark == "skip" or b.lang not in SHELLS | {"console", "python", "py", "pycon"}:
                continue
            if b.mark == "parse":
                for cmd, _ in _commands(b.body, b.lang == "console"):
                    err = parse_only(cmd)
                    if err:
                        res.failures.append(f"{where}:{line}: {err}")
                continue
            if b.lang in SHELLS | {"console"}:
                new: list[str] = []
                for cmd, expected in _commands(b.body, b.lang == "console"):
                    shown = unplace(run_shell(cmd, workdir, env), workdir).split("\n")
                    actual = [mask(x) for x in shown]
                    if b.lang == "console":
                        if not matches([mask(x, workdir) for x in expected], actual):
                            res.failures.append(_diff(where, line, cmd, expected, shown))
                        new += ["$ " + cmd.replace("\n", "\\\n")] + refreshed(expected, shown)
                    elif actual and actual[-1].startswith("[exit "):
                        res.failures.append(f"{where}:{line}: `{cmd}` failed:\n" + "\n".join(actual[-20:]))
                if b.lang == "console":
                    res.bodies[b.start] = new
            elif b.lang == "pycon":
                new = []
                for src, expected in _statements(b.body):
                    out = unplace(run_python(src, namespace, True), workdir)
                    shown = out.split("\n") if out else []
                    actual = [mask(x) for x in shown]
                    if not matches([mask(x, workdir) for x in expected], actual):
                        res.failures.append(_diff(where, line, src, expected, shown))
                    src_lines = src.split("\n")
                    new += [">>> " + src_lines[0]] + ["... " + s if s else "..." for s in src_lines[1:]]
                    new += refreshed(expected, shown)
                res.bodies[b.start] = new
            else:
                out = run_python("\n".join(b.body), namespace, False)
                if "Traceback (most recent call last)" in out:
                    res.failures.append(f"{where}:{line}: the Python example raised:\n{out}")
    finally:
        os.chdir(old_cwd)
    return res


def _diff(where: Path, line: int, cmd: str, expected: list[str], actual: list[str]) -> str:
    import difflib

    diff = "\n".join(difflib.unified_diff(expected, actual, "shown", "printed now", lineterm="", n=1))
    return (f"{where}:{line}: the output of `{cmd}` differs from the page (refresh: python -m pytest "
            f"tests/test_docs.py --update-docs):\n{diff}")


def rewrite(path: Path, bodies: dict[int, list[str]]) -> bool:
    """Put the fresh outputs into the page; True when it changed."""
    text = path.read_text()
    lines = text.split("\n")
    for b in sorted(blocks(text), key=lambda b: -b.start):
        if b.start in bodies:
            lines[b.start:b.end] = [(b.indent + s) if s else s for s in bodies[b.start]]
    new = "\n".join(lines)
    if new != text:
        path.write_text(new)
    return new != text


def pages() -> list[Path]:
    """README.md and every page of the site (docs/_incoming/ is not part of it)."""
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "_incoming" not in p.parts)
