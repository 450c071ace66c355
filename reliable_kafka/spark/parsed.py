"""SQL expressions parsed once per Spark session, not once per batch.

``selectExpr`` (and, in Spark 4, ``F.expr``, a lazily parsed ``SqlExpression``) runs Spark's SQL
parser every time a DataFrame step is built: on the driver's stream thread, once per batch and
projection (measured: about 30% of that thread's samples in a tracked job). A column holding the
already parsed Catalyst expression skips it; the plan is the same. Only SQL whose text is the same
every batch gains (a per-batch salt makes new text, parsed once and then dropped with the rest
when the cache is full).

The parser captures the session's ANSI mode in the ``CAST`` it builds, so the cache is keyed by
the session and its ``spark.sql.ansi.enabled``; each miss is parsed with that session active, as
``selectExpr`` does. Our SQL has no backslashes or double quotes, so the parser's other settings
(escaped string literals, double-quoted identifiers) do not change what it builds.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["parsed_column", "select_parsed"]

CACHE_LIMIT = 512  # distinct (session, mode, text) entries; cleared at once when full

_lock = threading.Lock()
_columns: dict[tuple[str, str, str], Any] = {}


def _session_key(session) -> tuple[str, str]:
    jsession = session._jsparkSession
    return str(jsession.sessionUUID()), str(session.conf.get("spark.sql.ansi.enabled", "false")).lower()


def _parse(session, sql: str):
    """``sql`` parsed by ``session``'s parser with ``session`` active (what ``selectExpr`` does), as
    a Column over the Catalyst expression."""
    from pyspark.sql import Column

    from reliable_kafka.spark.writer import jvm_class

    jsession = session._jsparkSession
    sessions = jvm_class(session, "org.apache.spark.sql.SparkSession")
    before = sessions.getActiveSession()
    sessions.setActiveSession(jsession)
    try:
        expression = jsession.sessionState().sqlParser().parseExpression(sql)
    finally:
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()
    return Column(jvm_class(session, "org.apache.spark.sql.classic.ExpressionUtils").column(expression))


def parsed_column(session, sql: str, key: tuple[str, str] | None = None):
    """A Column of the SQL expression ``sql`` (it may end in ``AS name``), parsed once per session
    and ANSI mode: the same Column object for the same text. ``key``: :func:`_session_key` of
    ``session``, when the caller has it."""
    full = (*(key or _session_key(session)), sql)
    with _lock:
        column = _columns.get(full)
    if column is not None:
        return column
    column = _parse(session, sql)  # two threads may both parse the same text: the same column either way
    with _lock:
        if len(_columns) >= CACHE_LIMIT:
            _columns.clear()
        return _columns.setdefault(full, column)


def select_parsed(df, *items):
    """``df.selectExpr(*items)`` with each SQL text parsed once (:func:`parsed_column`); a Column
    among ``items`` is taken as it is (SQL that changes every batch: ``F.expr``)."""
    session = df.sparkSession
    key = _session_key(session)
    return df.select(*[parsed_column(session, i, key) if isinstance(i, str) else i for i in items])
