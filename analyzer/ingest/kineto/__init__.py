"""PyTorch profiler (Kineto) JSON traces: the reader (``reader.read``), its two decoding paths (``scan``, ``blocks``),
the event records (``events``) and the canonical tables built from them (``tables``)."""
