"""Op tables (Parquet, Arrow IPC, CSV; the What-if artifact's schema as one dialect): the reader (``reader.read``),
the frame and op vocabulary (``frame``, ``ops``), parallel layout (``layout``), p2p pairing (``p2p``) and each op's
dependencies (``deps``)."""
