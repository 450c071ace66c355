"""Output rows a transform fails with ``rk_fail`` (Storm's ``collector.fail``), found in the write.

The transform's outputs are observed (``DataFrame.observe``) before the failed rows are filtered
out, so the write that sends the other rows to Kafka also reports, per failed row, its roots, its
``rk_fail_reason`` and its ``rk_fail_retry``: no second Spark job, no row through Python. The
observation sits in the write's result stage like the children's (``reliable_kafka.spark.writer``),
so a partition's failed rows are counted once, from the attempt that completed it. The driver then
writes the failure records and the FAIL entries, before the inputs' final acks (``SparkJob._write``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reliable_kafka.errors import StateError
from reliable_kafka.spark.anchors import ANCHORS_COLUMN, FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

__all__ = ["FailedRow", "failed_from_metrics", "observe_failed"]


@dataclass(frozen=True)
class FailedRow:
    """One output row with ``rk_fail`` true: the distinct non-zero roots of its anchors (none for an
    untracked row), why (``rk_fail_reason``) and whether a retry can help (``rk_fail_retry``)."""

    roots: tuple[int, ...]
    reason: str | None
    retry: bool


def observe_failed(outputs: DataFrame) -> tuple[DataFrame, Observation]:
    """(``outputs`` without the rows that have ``rk_fail`` true and without the ``rk_fail*`` columns,
    the ``Observation`` whose metrics after the write are ``failed``: the failed rows' count, and
    ``rows``: their roots, reasons and retry flags)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    columns = set(outputs.columns)
    failed = f"coalesce(CAST(`{FAIL_COLUMN}` AS BOOLEAN), false)"
    roots = (
        f"array_distinct(filter(transform(coalesce(`{ANCHORS_COLUMN}`, array()), p -> p.root), "
        f"r -> r IS NOT NULL AND r != 0))"
    )
    reason = f"CAST(`{FAIL_REASON_COLUMN}` AS STRING)" if FAIL_REASON_COLUMN in columns else "CAST(NULL AS STRING)"
    retry = f"coalesce(`{FAIL_RETRY_COLUMN}`, true)" if FAIL_RETRY_COLUMN in columns else "true"
    row = f"named_struct('roots', {roots}, 'reason', {reason}, 'retry', {retry})"
    observation = Observation(f"rk-failed-{uuid.uuid4().hex}")
    observed = outputs.observe(
        observation,
        F.expr(f"count_if({failed})").alias("failed"),
        F.expr(f"collect_list(IF({failed}, {row}, NULL))").alias("rows"),  # collect_list skips nulls
    )
    kept = observed.filter(f"NOT {failed}").drop(FAIL_COLUMN, FAIL_REASON_COLUMN, FAIL_RETRY_COLUMN)
    return kept, observation


def failed_from_metrics(metrics: dict[str, Any], *, what: str) -> tuple[int, list[FailedRow]]:
    """(failed rows, each with its roots) from :func:`observe_failed`'s metrics. Metrics without them
    raise :class:`StateError`: acking the inputs without failing those roots would complete them."""
    if "failed" not in metrics or "rows" not in metrics:
        raise StateError(
            f"spark output: {what}: Spark reported no failed rows (metrics {sorted(metrics)}); "
            f"the batch's roots are failed and redelivered"
        )
    rows = [
        FailedRow(roots=tuple(row["roots"] or ()), reason=row["reason"], retry=row["retry"] is not False)
        for row in metrics["rows"] or ()
    ]
    return int(metrics["failed"] or 0), rows
