"""Exact conversion of JSON microsecond numbers (as text) to int64 nanoseconds, vectorized.

Float64 cannot hold "1712195495519695.8" µs to the nanosecond, so the integer and fractional parts
of the decimal text are converted separately; exponent notation falls back to float.
"""

from __future__ import annotations

import polars as pl

_MAX_US = (2**63 - 1) // 1000 - 1


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
    # past int64 once in ns (a ts of 1e30 written out in digits): null, never a wrapped product
    exact = pl.when(int_part <= _MAX_US).then(sign * (int_part * 1000 + frac3 + round_up))
    approx = (pl.col("t").cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)
    out = frame.select(pl.when(plain).then(exact).otherwise(approx).alias("ns"))["ns"]
    return out.rename(text.name)


# Below 2^43 µs a float64 is within 2^-11 µs (0.49 ns) of the decimal it was parsed from, so splitting
# off the (exact) integer part and rounding the fraction to whole ns recovers a 3-decimal text exactly.
FLOAT_EXACT_LIMIT_US = 2.0**43
_INT_EXACT_LIMIT_US = 2**53  # JSON integers up to here are exact in float64


def us_numbers_to_ns(values: list[int | float | None]) -> pl.Series | None:
    """Decoded JSON numbers (µs) -> Int64 ns, exactly; ``None`` when some value needs its text.

    Integers are exact (< 2^53); floats are exact below 2^43 µs. A float at or above that (e.g. epoch
    microseconds with a fraction, ``1712195495519695.8``) may be off by a nanosecond, so the caller
    falls back to :func:`us_text_to_ns` on the raw JSON text.
    """
    d = pl.Series("t", values, dtype=pl.Float64, strict=False)
    if d.len() == 0:
        return d.cast(pl.Int64)
    t = pl.col("t")
    whole = t.floor()
    # one query, not ten eager operations (thousands of small ranks call this eight times each)
    out = d.to_frame().select(
        # strict=False: a value past int64 (a ts of 1e30) is null here and the big-value check sends it to
        # the text path, which reads it as null (dropped and counted), never a Polars error
        (whole.cast(pl.Int64, strict=False) * 1000 + ((t - whole) * 1000.0).round(0).cast(pl.Int64, strict=False)
         ).alias("t"),
        (t.abs() >= FLOAT_EXACT_LIMIT_US).alias("big"),
    )
    big = out["big"]
    if big.any():
        for v, b in zip(values, big.to_list()):  # only reached for epoch-style timestamps
            if b and (type(v) is not int or abs(v) >= _INT_EXACT_LIMIT_US):
                return None
    return out["t"]
