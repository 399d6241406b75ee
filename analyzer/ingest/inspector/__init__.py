"""NCCL Inspector JSON-lines logs: the reader (``reader``), line decoding (``decode``), streaming and folding of
per-collective records (``stream``, ``fold``), ranks from communicators (``ranks``) and parse workers (``workers``)."""
