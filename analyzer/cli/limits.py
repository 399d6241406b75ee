"""The input-limit flags every loading command shares (``--max-inflated-size`` and the rest; README "Input limits").

They are not parameters of the command functions: each stores its value in the click context, and
``limits_from_context`` builds the ``Limits`` the loader reads, so adding a limit touches no command.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import click

from ..ingest.limits import DEFAULT, Limits, parse_size, size_text

_KEY = "commscope_limits"


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None:
        return
    if param.name == "max_inflated_bytes":
        size = parse_size(value)
        if size is None or size <= 0:
            raise click.BadParameter(f"{value!r}: expected a size such as 8G, 512M or 1048576")
        value = size
    ctx.meta.setdefault(_KEY, {})[param.name] = value


def limit_options() -> list:
    """click options for ``common_load_options``."""
    return [
        click.option("--max-inflated-size", "max_inflated_bytes", metavar="SIZE", expose_value=False,
                     callback=_store, help=f"Refuse a .gz that inflates past this (default "
                     f"{size_text(DEFAULT.max_inflated_bytes)}; e.g. 16G)."),
        click.option("--max-inflate-ratio", "max_inflate_ratio", type=click.IntRange(2), expose_value=False,
                     callback=_store, help=f"Refuse a .gz that inflates more than this many times its size "
                     f"(default {DEFAULT.max_inflate_ratio}; gzip bombs reach ~1000)."),
        click.option("--max-events", "max_events", type=click.IntRange(1), expose_value=False, callback=_store,
                     help=f"Refuse a rank with more events for the tables (default {DEFAULT.max_events:,})."),
        click.option("--max-json-depth", "max_json_depth", type=click.IntRange(2, 100_000), expose_value=False,
                     callback=_store, help=f"Refuse JSON nested deeper (default {DEFAULT.max_json_depth}; "
                     "a profiler writes ~7)."),
        click.option("--max-ranks", "max_ranks", type=click.IntRange(1, 1 << 31), expose_value=False, callback=_store,
                     help=f"Refuse rank numbers from this on, and larger worlds or layouts (default "
                     f"{DEFAULT.max_ranks:,})."),
    ]


def limits_from_context() -> Limits:
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_KEY, {}) if ctx is not None else {}
    return replace(DEFAULT, **{f.name: given[f.name] for f in fields(Limits) if f.name in given})
