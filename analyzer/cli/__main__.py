"""``python -m analyzer.cli``: the same entry point as the ``commscope`` script."""

from .app import entry

entry()
