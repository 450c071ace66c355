"""What an acker worker holds: its counters, and its state for each assigned ack partition."""

from __future__ import annotations

from dataclasses import dataclass, field

from reliable_kafka.core.acker_table import AckerTable

__all__ = ["AckerStats"]


@dataclass
class AckerStats:
    """Counters of one worker since it started (a restarted worker starts from zero)."""

    records: int = 0
    entries_folded: int = 0
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    expired_ownerless: int = 0
    invalid_entries: int = 0
    quarantined: int = 0
    outcome_records: int = 0
    pending: int = 0
    table_bytes: int = 0
    client_rebuilds: int = 0  # new Kafka clients after fatal errors (reliable_kafka.kafka.fatal)
    committed: dict[int, int] = field(default_factory=dict)


class AckerPartition:
    """What the worker holds for one assigned ack partition."""

    __slots__ = ("table", "next_offset", "event_ms", "event_wall_ms", "committed", "ownerless")

    def __init__(self, table: AckerTable, committed: int | None) -> None:
        self.table = table
        self.next_offset: int | None = None  # offset after the last record folded
        self.event_ms: int | None = None  # largest record timestamp seen
        self.event_wall_ms = 0  # wall clock when that timestamp was seen
        self.committed = committed
        self.ownerless = 0  # the table's expired_ownerless already added to the worker's stats

    def clock_ms(self, wall_ms: int) -> int | None:
        """Event time, carried forward by wall time while the partition is idle."""
        if self.event_ms is None:
            return None
        return self.event_ms + max(0, wall_ms - self.event_wall_ms)

    def commit_offset(self) -> int | None:
        low = self.table.low_offset()
        return low if low is not None else self.next_offset
