"""Dash dashboard over one Analysis; ``figures`` is pure and shared with the static HTML report."""
