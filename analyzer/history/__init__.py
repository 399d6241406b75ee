"""The run history: each analyzed run's summary in a store, trends with change points, named baselines.

Downstream of Analysis (a stage like the presenters): summary.py turns an Analysis into metric rows,
store.py keeps them (SQLite file or PostgreSQL), changepoints.py and trend.py read them back.
"""
