"""Hang triage from Flight Recorder dumps: the metric (``hang``) and the result every presenter formats (``analysis``).
Named ``hangs`` rather than DESIGN.md's ``triage/``: ``analyzer.triage`` is the public API function."""
