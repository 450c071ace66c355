"""The serial loop: a bolt with ``parallelism=1`` and a plain handler calls it inline, one tuple
after another, in the consume loop's thread (no threads, queues or locks); and a ``batch_handler``'s
one call per consumed batch. Both run once per received tuple or batch, so their lookups are
hoisted and counters are added once per batch (the figures in bench/bench_bolt_overhead.py).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from reliable_kafka import codec
from reliable_kafka.bolt.ack_packing import V2, pack_pair, unpack_pair
from reliable_kafka.bolt.collector import TupleBatch, consumed_tuple
from reliable_kafka.errors import AuthorizationError, DecodeError
from reliable_kafka.kafka.produce import ConsumedHeaders, ProducerUnusable
from reliable_kafka.ops.errors import handler_raised

if TYPE_CHECKING:
    from confluent_kafka import Message

    from reliable_kafka.bolt.runner import Bolt

__all__ = ["FATAL", "PROCESS_TIMED_RUN", "handle_serially", "handle_batch"]

log = logging.getLogger(__name__)

# raised by a handler, not the tuple's fault: the transaction aborts, or the process restarts or stops
FATAL: tuple[type[BaseException], ...] = (ProducerUnusable, AuthorizationError)
_ANCHORS = codec.ANCHORS_HEADER
# process latency: the loop reads the clock once per run of this many handler calls and gives
# each call the run's average (a clock read, a subtraction and an append per tuple cost about
# 0.1 us, a sixth of an untracked tuple's loop); a run within the first bucket (1 ms) is exact
PROCESS_TIMED_RUN = 32


def handle_serially(bolt: Bolt, messages: Sequence[Message], took: list[tuple[float, int]]) -> None:
    """One loop with its lookups hoisted and the handler called inline: this runs once per
    received tuple (counters that need no per-tuple update are added once per batch)."""
    stats, ends, handler, collector = bolt.stats, bolt._ends, cast("Callable[..., Any]", bolt.handler), bolt.collector
    clock, decode = bolt._clock.monotonic, codec.decode_anchors
    basic, add_pair, add_owed = bolt._acks_on_return, bolt._ack_pairs.append, bolt._ack_owed.append
    took_run = took.append
    # None: one tree, one-pair v2, or (root 0) untracked: the tuple makes its dict if asked
    anchors: dict[int, int] | None
    # a consumed record's: coordinates set, headers a list of (name, bytes) pairs (confluent-kafka's
    # types allow None and a dict, for a message made to produce); read once per tuple, unchecked
    topic: str
    partition: int
    offset: int
    headers: ConsumedHeaders | None
    # a batch_handler's batch, in columns: messages, anchors, user headers, one-tree root and edge
    batch = bolt.batch_handler is not None
    kept: list[Message] = []
    kept_anchors: list[dict[int, int] | None] = []  # None: one tree, read from its pair (root 0: untracked)
    kept_headers: list[ConsumedHeaders] = []
    kept_roots: list[int] = []
    kept_pairs: list[bytes | None] = []  # each record's one-pair v2 value, None when it is not in one tree
    keep, keep_anchors, keep_headers = kept.append, kept_anchors.append, kept_headers.append
    keep_root, keep_pair = kept_roots.append, kept_pairs.append
    untracked = handled_calls = failed_calls = 0  # a basic bolt's acked: the calls handled that did not raise
    # a batch comes a partition at a time: its next offset is noted per run of one partition's
    # records (a dict write per run, not per tuple)
    run_topic, run_partition, run_end = None, -1, 0
    # the clock is read once per run of PROCESS_TIMED_RUN records, each handled one given the
    # run's average: a handler's time includes its tuple's decoding (well under a microsecond),
    # a quarantine copy's time is left out
    total, run, message = len(messages), None, None
    try:
        for at in range(0, total, PROCESS_TIMED_RUN):
            skipped, paused = 0, 0.0  # the run's quarantined records, and their copies' seconds
            started = bolt._run_started = clock()  # (for oldest_call_age: once per run)
            run = messages if total <= PROCESS_TIMED_RUN else messages[at : at + PROCESS_TIMED_RUN]
            for message in run:
                topic, partition, offset = message.topic(), message.partition(), message.offset()  # type: ignore[assignment]
                if partition != run_partition or topic != run_topic:
                    if run_topic is not None:
                        ends[(run_topic, run_partition)] = run_end + 1
                    run_topic, run_partition = topic, partition
                run_end = offset  # its next offset is this + 1, added once per run of the partition
                headers = message.headers()  # type: ignore[assignment]  # read only: a new list is made when one is removed
                if headers is None and not batch:
                    # untracked (tracking off upstream): the tuple and the handler call below,
                    # without the tree's checks (about 0.04 us a tuple, a tenth of the untracked loop)
                    untracked += 1
                    tuple_ = consumed_tuple(message, topic, partition, offset, [], None, 0, 0)
                    if basic:
                        collector.current = tuple_
                    try:
                        handler(tuple_, collector)
                    except FATAL:
                        raise
                    except Exception as exc:
                        bolt._handler_failed(tuple_, exc)
                        failed_calls += 1
                    continue
                raw = None
                root = edge = 0  # the tuple's one tree, when it is in exactly one (its ack entry is made from it)
                if headers is None:  # no header at all: untracked (tracking off upstream)
                    headers = []
                elif len(headers) == 1:  # the common case: rk-anchors alone, or one header of the user's
                    if headers[0][0] == _ANCHORS:
                        raw, headers = headers[0][1], []
                elif headers:
                    found = [v for k, v in headers if k == _ANCHORS]
                    if found:
                        raw, headers = found[-1], [(k, v) for k, v in headers if k != _ANCHORS]
                if raw is not None:
                    try:
                        try:  # decode(raw) of one v2 pair, inlined: once per tuple
                            version, length, root, edge = unpack_pair(raw)
                        except struct.error:  # not 18 bytes (several pairs, v1, damaged): decode() judges it
                            version = 0
                        if version == V2 and length == 32 and root:
                            anchors = None  # its dict is made only if something reads tuple.anchors
                        else:
                            anchors = decode(raw)
                            [(root, edge)] = anchors.items() if len(anchors) == 1 else [(0, 0)]  # e.g. v1, one tree
                            if root:  # its ack entry is read from a one-pair v2 value, as the common case's
                                raw = pack_pair(root, edge)
                    except DecodeError as error:
                        # its tree cannot be acked: upstream times it out and replays it; the copy keeps it
                        assert bolt._quarantine is not None  # made by start()
                        quarantined_at = clock()
                        bolt._quarantine.decode_error(message, error)
                        stats.quarantined += 1
                        skipped += 1
                        paused += clock() - quarantined_at
                        continue
                else:  # untracked: its empty anchors dict is made only if something reads tuple.anchors
                    anchors = None
                    untracked += 1
                if batch:  # no tuple made: the batch makes one only if its handler asks
                    keep(message)
                    keep_anchors(anchors)
                    keep_headers(headers)
                    keep_root(root)
                    keep_pair(raw if root else None)
                    continue
                tuple_ = consumed_tuple(message, topic, partition, offset, headers, anchors, root, edge)
                if basic:
                    collector.current = tuple_  # outputs are anchored to it
                try:
                    handler(tuple_, collector)
                except FATAL:
                    raise  # not the tuple's fault: the transaction aborts, or the process restarts or stops
                except Exception as exc:  # a basic bolt's raise fails the input (and replays it); a rich one's too
                    bolt._handler_failed(tuple_, exc)
                    failed_calls += 1
                else:
                    if basic:  # collector.ack(tuple_), its entries kept in the batch's lists (no call per tuple)
                        if root:  # one tree: the one-pair v2 value read above (a tuple's anchors do not change)
                            add_pair(raw)  # type: ignore[arg-type]  # not None: root came from it
                            add_owed(tuple_.ack_val)
                        elif anchors:  # not one tree: the dict read above (a tuple's anchors do not change)
                            ack_val = tuple_.ack_val
                            for root, edge in anchors.items():
                                add_pair(pack_pair(root, edge))
                                add_owed(ack_val)
            if not batch and (handled := len(run) - skipped):
                took_run(((clock() - started - paused) / handled, handled))
                handled_calls += handled
            run = None
        if kept:
            batch_ = TupleBatch(kept, kept_anchors, kept_headers, kept_roots, kept_pairs)
            bolt._handle_batch(batch_, kept_roots, kept_pairs, took)
    finally:
        if run is not None and not batch:  # a call raised through: the run's tuples before it
            if handled := run.index(message) - skipped:
                took_run(((clock() - started - paused) / handled, handled))
                handled_calls += handled
        if run_topic is not None:
            ends[(run_topic, run_partition)] = run_end + 1
        stats.untracked += untracked
        if basic:
            stats.acked += handled_calls - failed_calls


def handle_batch(
    bolt: Bolt, batch: TupleBatch, roots: list[int], pairs: list[bytes | None], took: list[tuple[float, int]]
) -> None:
    """``batch_handler`` on one batch: acked when it returns (the entries ``collector.ack`` would
    add for each tuple), every tuple failed when it raises. ``roots``/``pairs``: each record's one
    tree, and its one-pair v2 value (root 0 and None: untracked, or in several trees, read from
    its anchors)."""
    count = len(batch)
    clock = bolt._clock.monotonic
    started = bolt._run_started = clock()
    try:
        cast("Callable[..., Any]", bolt.batch_handler)(batch, bolt.collector)
    except FATAL:
        raise  # not the tuples' fault: the transaction aborts, or the process restarts or stops
    except Exception as exc:
        bolt.stats.handler_errors += count
        handler_raised(  # the last error, and a log that does not repeat a traceback per batch
            bolt,
            exc,
            log,
            "%s: batch handler %s raised on %d tuples from %s; failing them",
            bolt.name,
            getattr(bolt.batch_handler, "__name__", bolt.batch_handler),
            count,
            batch[0].coordinates,
            where=str(batch[0].coordinates),
        )
        for tuple_ in batch:
            bolt.collector.fail(tuple_, error=exc)
    else:
        made = batch._tuples  # only these can have emitted children (an emit names its input)
        owed = [0] * count  # each record's ack val (read as columns with its pair, as the loop's)
        for index, tuple_ in made.items():
            owed[index] = tuple_.ack_val
        if 0 in roots:  # untracked records (no entry) or records in several trees (one per tree)
            add_pair, add_owed = bolt._ack_pairs.append, bolt._ack_owed.append
            for index, root in enumerate(roots):
                if root:
                    add_pair(pairs[index])  # type: ignore[arg-type]  # in one tree: its pair is set
                    add_owed(owed[index])
                elif anchors := batch._anchors[index]:
                    for root, edge in anchors.items():
                        add_pair(pack_pair(root, edge))
                        add_owed(owed[index])
        else:  # every record in one tree: the columns are the entries
            bolt._ack_pairs.extend(pairs)  # type: ignore[arg-type]  # all set: every record is in one tree
            bolt._ack_owed.extend(owed)
        bolt.stats.acked += count
    finally:
        took.append(((clock() - started) / count, count))  # each tuple's share of the call
