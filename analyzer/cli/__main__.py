"""``python -m analyzer.cli``: the same entry point as the ``commscope`` script."""

from .app import entry

if __name__ == "__main__":  # importing the package's modules (a walk of them) must not run the CLI
    entry()
