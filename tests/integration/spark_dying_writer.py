"""A test-only OutputWriter whose task dies after writing (the shipped writer has no such hook).

Spark ships the writer to its Python workers with cloudpickle; this module is registered to be
pickled by value, so the workers need not import it from the tests folder.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from pyspark import cloudpickle

from reliable_kafka.spark import writer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class DyingWriter(writer.OutputWriter):
    """The first task that has written ``after`` outputs while the file ``flag`` exists deletes it,
    flushes those outputs and raises: a task dying after writing, which Spark retries."""

    flag: str = ""
    after: int = 0

    def __call__(self, rows) -> None:
        return writer.OutputWriter.__call__(self, self._watched(rows))

    def _watched(self, rows):
        handed = 0
        for row in rows:
            yield row
            handed += 1  # the writer asks for the next row only after producing this one
            if handed == self.after:
                self._fail_once()

    def _fail_once(self) -> None:
        try:
            os.unlink(self.flag)
        except FileNotFoundError:
            return
        writer._producer(self.bootstrap_servers, self.kafka_config).flush(30)
        raise RuntimeError("DyingWriter: this task fails on purpose after writing outputs")
