"""Secrets never leave the process: the one redaction every printed or written text goes through.

What it removes, wherever it appears in a text (a message, a report, a stored run, a dashboard response):

- the password of any URL (``scheme://user:PASSWORD@host``): everything between the user name's ``:`` and
  the authority's last ``@`` (a password holding an unencoded ``@`` or ``/`` included), an empty user too;
- ``password=...`` pairs (``?password=`` URL parameters, ``key=value`` connection strings, ``sslpassword``);
- every secret this process was told about (``remember``): the passwords of the store URLs it was given,
  raw and percent-decoded, and ``$PGPASSWORD``, so that a driver message repeating one in another form
  (a host name libpq cut out of a malformed URL) still shows ``***``.

Pure string work, no project imports: errors.py, the CLI, the store and the dashboards all call it.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

MASK = "***"
MIN_SECRET = 4  # shorter remembered values are not replaced as bare text (they would mangle words); URL forms are

_SCHEME = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://")
_TOKEN_END = re.compile(r"[\s'\"<>]")  # a URL in a text ends at whitespace or a quote
# a value is never empty nor starts with '=': base64 padding ('.../pass==') is no password pair
_PAIR = re.compile(r"(?i)\b((?:ssl)?pass(?:word|wd)?|pwd)(\s*=\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|(?!=)[^&\s'\"]+)")
_secrets: set[str] = set()


def remember(*values: str | None) -> None:
    """Secrets to scrub from every later text (raw and percent-decoded)."""
    for v in values:
        if v:
            for form in {v, unquote(v)}:
                if len(form) >= MIN_SECRET:
                    _secrets.add(form)


def remember_environment() -> None:
    """``$PGPASSWORD`` (libpq's own variable): never printed even when a driver repeats it."""
    remember(os.environ.get("PGPASSWORD"))


def _userinfos(text: str) -> list[tuple[int, int, str]]:
    """(start, end, user) of each URL's user information: from after ``scheme://`` to the last ``@`` of the
    token (so a password holding an unencoded ``@`` or ``/`` is covered whole; a URL whose path holds an
    ``@`` loses a little more text: the safe side). Linear in the text."""
    out = []
    pos = 0
    while (m := _SCHEME.search(text, pos)) is not None:
        begin = m.end()
        stop = _TOKEN_END.search(text, begin)
        end = stop.start() if stop else len(text)
        at = text.rfind("@", begin, end)
        if at >= 0:
            info = text[begin:at]
            user, sep, _ = info.partition(":")
            if sep:  # no ':' is no password ('https://cdn/npm/@scope/pkg@1.0' is a path)
                out.append((begin + len(user) + 1, at, user) if "/" not in user else (begin, at, ""))
        pos = end
    return out


def redact(text: str) -> str:
    """``text`` without any password (see the module doc); unchanged when there is none."""
    if not text:
        return text
    out = text
    if "://" in out and "@" in out:
        for begin, end, _ in reversed(_userinfos(out)):
            out = out[:begin] + MASK + out[end:]
    if "=" in out:
        low = out.lower()  # a cheap look first: reports of many MB hold '=' but rarely a password pair
        if "pass" in low or "pwd" in low:
            out = _PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)
    for s in sorted(_secrets, key=len, reverse=True):  # longest first: a secret containing another goes whole
        if s in out:
            out = out.replace(s, MASK)
    return out


_SCRIPT = re.compile(r"(<script\b[^>]*>)(.*?)(</script\s*>)", re.IGNORECASE | re.DOTALL)


def redact_document(text: str) -> str:
    """``redact`` for a whole report or page: an HTML document's scripts are left as they are (an embedded
    plotly.js holds ``this.pass=a`` and URLs with '@': masking them would break the page; commscope's own text is
    outside them), everything else is redacted."""
    head = text[:512].lstrip().lower()
    if not head.startswith(("<!doctype html", "<html")) or "<script" not in text:
        return redact(text)
    out, pos = [], 0
    for m in _SCRIPT.finditer(text):
        out.append(redact(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(redact(text[pos:]))
    return "".join(out)


def secrets_in_url(url: str) -> list[str]:
    """The password of a URL as the redaction sees it, and its ``password=`` parameters (for ``remember``)."""
    found = [url[b:e] for b, e, user in _userinfos(url) if e > b]
    found += [v.strip("'\"") for _, _, v in _PAIR.findall(url) if v.strip("'\"")]
    return found
