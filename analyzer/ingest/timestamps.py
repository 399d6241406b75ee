"""Exact conversion of JSON microsecond numbers (as text) to int64 nanoseconds, vectorized.

Float64 cannot hold "1712195495519695.8" µs to the nanosecond, so the integer and fractional parts
of the decimal text are converted separately; exponent notation falls back to float.
"""

from __future__ import annotations

import polars as pl


def us_text_to_ns(text: pl.Series) -> pl.Series:
    """Series of JSON number texts (bytes or str, µs) -> Int64 ns; empty/invalid -> null."""
    s = text.cast(pl.Utf8) if text.dtype == pl.Binary else text
    frame = pl.DataFrame({"t": s})
    plain = pl.col("t").str.contains(r"^\s*-?\d+(?:\.\d*)?\s*$")
    sign = pl.when(pl.col("t").str.starts_with("-")).then(-1).otherwise(1)
    int_part = pl.col("t").str.extract(r"^\s*-?(\d+)", 1).cast(pl.Int64, strict=False)
    frac = pl.col("t").str.extract(r"\.(\d+)", 1).fill_null("")
    # first three fractional digits are nanoseconds; the fourth rounds (sub-ns precision is noise)
    frac3 = (frac + pl.lit("000")).str.slice(0, 3).cast(pl.Int64, strict=False)
    round_up = (frac.str.slice(3, 1).cast(pl.Int64, strict=False) >= 5).fill_null(False).cast(pl.Int64)
    exact = sign * (int_part * 1000 + frac3 + round_up)
    approx = (pl.col("t").cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)
    out = frame.select(pl.when(plain).then(exact).otherwise(approx).alias("ns"))["ns"]
    return out.rename(text.name)
