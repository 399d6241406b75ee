"""Nsight Systems SQLite exports: the reader (``reader.read``), the export's schema (``schema``) and NCCL's
NVTX ranges (``nvtx``)."""
