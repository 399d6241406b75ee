"""``--comm-kernel REGEX=OP`` and ``--comm-config FILE``, shared by every loading command (like the input limits).

Not parameters of the command functions: each stores its value in the click context and ``rules_from_context``
builds the ``UserRules`` the loader applies (``comm_catalogue.UserRules``), so analyze, compare, dashboard,
export and history add honour them alike. Without ``--comm-config`` the file named by ``$COMMSCOPE_CONFIG`` is
read (the history dashboard reopens a run's traces with it too).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from ..comm_catalogue import UserRules, parse_flag, read_config
from ..errors import UsageError

_KEY = "commscope_comm_rules"
ENV = "COMMSCOPE_CONFIG"


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    try:
        if param.name == "comm_kernel":
            rules = tuple(parse_flag(v) for v in value or ())
        else:
            rules = read_config(Path(value)) if value else None
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None
    if rules is not None:
        ctx.meta.setdefault(_KEY, {})[param.name] = rules


def comm_rule_options() -> list:
    """click options for ``common_load_options``."""
    return [
        click.option("--comm-kernel", "comm_kernel", multiple=True, metavar="REGEX=OP", expose_value=False,
                     callback=_store, help="Also count GPU work whose name matches REGEX as communication OP "
                     "(all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send, recv, send_recv, "
                     "barrier, gather, scatter, copy; or compute: not communication). Repeatable; first match wins."),
        click.option("--comm-config", "comm_config", metavar="FILE", expose_value=False, callback=_store,
                     help=f"TOML file of [[comm_kernel]] rules (pattern, op), after --comm-kernel's (default: "
                     f"${ENV} when set)."),
    ]


def rules_from_context() -> UserRules:
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_KEY, {}) if ctx is not None else {}
    flags = given.get("comm_kernel", ())
    config = given.get("comm_config")
    if config is None:
        config = env_rules()
    return UserRules((*flags, *config))


def env_rules() -> tuple:
    """The rules of ``$COMMSCOPE_CONFIG`` (none when unset)."""
    path = os.environ.get(ENV)
    return read_config(Path(path)) if path else ()
