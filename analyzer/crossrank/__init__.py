"""Cross-rank stage: match instances across ranks, align clocks, read collective metadata, build the graph."""
