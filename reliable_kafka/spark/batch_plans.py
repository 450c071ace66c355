"""A stream batch's output plan built once per query and rebound to each later batch.

Spark hands ``foreachBatch`` a new DataFrame per micro-batch: a ``LogicalRDD`` over the batch's
offsets, with the same output attributes every batch. Each DataFrame step built over it (the
spout's input projection, the user's transform, the writer's header projections) is parsed and
analysed by Spark's driver anew, batch after batch, and Spark's planner code runs so often that
the JIT compiles more of it every batch (docs/performance.md, wt-spk4 and wt-spk6). Here the
analysed plan of the first stream batch's sink rows is kept (the template), and for each later
batch copied with the batch's leaf in place of the template's and the batch's salt in place of
the template's salt (``jvm/BatchPlans.java``): the same expressions over the new batch, so the
same rows and bytes, without parsing, analysis or the Python transform.

Only a plan that reads nothing but the batch is kept (no other table, whose files or data could
change between batches; no subquery; no observation of the transform's own, whose name is used
once; no nondeterministic expression but ``monotonically_increasing_id``). The transform is then
called once per query, not per batch: a transform whose plan depends on anything but its input's
schema (a Python-side switch, a counter) must run with ``reuse_batch_plans=False``.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING, Any

from reliable_kafka.spark.jvm_functions import batch_plans_available
from reliable_kafka.spark.writer import jvm_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

__all__ = ["BatchPlans"]

log = logging.getLogger(__name__)

JAVA_CLASS = "reliablekafka.spark.BatchPlans"


def _salt_bytes(salt: int) -> bytearray:
    """The salt as ``derive.salt_sql`` writes it: 8 little-endian bytes (a py4j ``byte[]``)."""
    return bytearray(struct.pack("<q", salt))


class BatchPlans:
    """One query's template: the analysed plan of a stream batch's observed sink rows
    (``writer.output_rows_jvm``), its batch, its salt and its observation's name. ``rebound`` and
    ``built`` count the batches that took each path."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rebound = 0
        self.built = 0
        self.refused: str | None = None  # why the plan is not kept (logged once)
        self._template: Any = None  # the JVM LogicalPlan
        self._salt = bytearray()
        self._salts = 0
        self._observation: str | None = ""  # the template's observation's name (pyspark types it optional)

    def rows(self, batch: DataFrame, salt: int, session: SparkSession) -> tuple[DataFrame, Observation] | None:
        """The observed sink rows of ``batch`` (the DataFrame ``foreachBatch`` got) with ``salt``,
        as (DataFrame of ``session``, its new ``Observation``), from the template; None without
        one (the caller builds them)."""
        if self._template is None:
            return None
        from py4j.protocol import Py4JJavaError
        from pyspark.sql import DataFrame, Observation

        observation = Observation(f"rk-children-{uuid.uuid4().hex}")
        observation._jo = jvm_class(session, "org.apache.spark.sql.Observation")(observation._name)
        plans = jvm_class(session, JAVA_CLASS)
        try:
            jdf = plans.rebind(
                session._jsparkSession,
                self._template,
                batch._jdf.logicalPlan(),
                self._salt,
                _salt_bytes(salt),
                self._salts,
                self._observation,
                observation._jo,
            )
        except Py4JJavaError as exc:  # another leaf (a new query): build anew, keep that one
            log.info("%s: batch plan not rebound, building it anew: %s", self.name, exc.java_exception)
            self._template = None
            return None
        self.rebound += 1
        return DataFrame(jdf, session), observation

    def remember(self, rows: DataFrame, observation: Observation, batch: DataFrame, salt: int) -> None:
        """Keep ``rows`` (built over ``batch`` with ``salt``, observed by ``observation``) as the
        template, when it reads nothing but the batch."""
        self.built += 1
        session = rows.sparkSession
        if not batch_plans_available(session):  # BatchPlans.java did not compile against this Spark
            self.refused = "BatchPlans is not in reliable-kafka's jar"
            return
        plans = jvm_class(session, JAVA_CLASS)
        plan, leaf = rows._jdf.logicalPlan(), batch._jdf.logicalPlan()
        salts = 0
        try:  # the batch is written either way: a template that cannot be kept only costs time
            why = plans.whyNot(plan, leaf, observation._name)
            if why is None:
                salts = plans.salts(plan, _salt_bytes(salt))
                why = None if salts else "the salt is not in the plan"
        except Exception as exc:
            why = f"the plan could not be read: {exc}"
        if why is not None:
            if why != self.refused:
                log.info("%s: each batch's plan is built anew: %s", self.name, why)
            self.refused = why
            return
        self._template, self._salt, self._salts, self.refused = plan, _salt_bytes(salt), salts, None
        self._observation = observation._name
