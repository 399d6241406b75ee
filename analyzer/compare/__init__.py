"""The regression gate: can two runs be compared (``gate``), their differences and verdict (``diff``), and the
thresholds that decide it (``thresholds``)."""
