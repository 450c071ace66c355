"""Acker table figures: entries folded per second and bytes per pending root, NumPy vs a dict.

Workload (every implementation gets the same pre-built records of ~500 entries):

* fill: INIT for ``--roots`` new roots, 500 per record, from an empty table (growth included);
* steady: each record INITs 166 new roots, sends the bolt's ACK (edge ^ child) for 166 old roots
  and the child's ACK for 166 roots a few records older, completing them; about ``--roots``
  roots stay pending the whole time.

Folded three ways: a plain dict (Storm's acker loop, XOR and owner only: no timeout buckets or
low offsets, so it flatters the dict), ``AckerTable.fold`` one record a call, and
``AckerTable.fold_records`` several records a call. Rates are entries per CPU second of this
process, which is steadier than wall time on a shared machine.

The FAIL trace (``--fail-rate``, 0.1% by default) is the steady trace with some completing ACKs
turned into a FAIL and a sibling's ACK in the next record: decode+fold and fold alone, with the
count of extra passes over the table a fold group needed (a fallback; 0 expected).
``--baseline REV`` also folds it with the table and codec of git revision REV, alternating with
this code round by round (``--rounds``), so both see the same machine load, and then taking turns
fold group by fold group (a steadier ratio on a busy machine).

Prints figures, asserts nothing. Sized for a shared 2-core machine: the default (1M roots) runs in
about a minute (more with ``--baseline``). Usage: ``./rk bench acker_table [--roots N]
[--steady-batches B] [--records-per-call K] [--baseline REV [--rounds R]]``.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np

from reliable_kafka import codec
from reliable_kafka.core.acker_table import AckerTable
from reliable_kafka.core.kinds import EventKind

BATCH = 500
PER_ROOT = BATCH // 3  # roots started (and finished) per steady batch
LAG = 16  # batches between a root's bolt ACK and its child's ACK
SPOUT, BOLT = 11, 42


def with_fails(steady, rate: float, seed: int):
    """The steady batches with ``rate`` of their completing child ACKs turned into a FAIL, and
    a sibling's ACK for the same root in the next batch (so, mostly in the same fold group):
    what a bolt that fails one of two children sends. The root is FAILED at the FAIL; the late
    ACK starts an ownerless entry that expires silently."""
    rng = np.random.default_rng(seed)
    out = [list(batch) for batch in steady]
    for b in range(LAG, len(steady) - 1):
        kinds, roots, vals, sender = out[b]
        # The completing child ACKs of this batch are the roots acked by the bolt LAG ago.
        bolt_acked = steady[b - LAG][1][steady[b - LAG][0] == EventKind.ACK]
        child = np.flatnonzero(np.isin(roots[: len(steady[b][1])], bolt_acked))
        fail = child[rng.random(len(child)) < rate]
        if not len(fail):
            continue
        kinds = kinds.copy()
        kinds[fail] = EventKind.FAIL
        vals = np.where(np.isin(np.arange(len(vals)), fail), 0, vals)
        out[b][0], out[b][2] = kinds, vals
        nk, nr, nv, ns = out[b + 1]
        out[b + 1] = [
            np.append(nk, np.full(len(fail), EventKind.ACK, np.uint8)),
            np.append(nr, roots[fail]),
            np.append(nv, rng.integers(1, 2**62, len(fail), dtype=np.int64)),
            ns,
        ]
    return [tuple(batch) for batch in out]


def encoded(batches) -> list[bytes]:
    """Each batch as the ack-topic record value a sender writes."""
    return [codec.encode_ack_batch(sender, kinds, roots, vals) for kinds, roots, vals, sender in batches]


def build_workload(roots: int, steady_batches: int, seed: int):
    """Pre-built (kinds, roots, vals, sender) batches: fill phase, then steady phase."""
    rng = np.random.default_rng(seed)
    total = roots + steady_batches * PER_ROOT
    ids = rng.integers(1, 2**63 - 1, size=total, dtype=np.int64)
    edges = rng.integers(1, 2**63 - 1, size=total, dtype=np.int64)
    children = rng.integers(1, 2**63 - 1, size=total, dtype=np.int64)
    fill = []
    for start in range(0, roots, BATCH):
        sl = slice(start, min(start + BATCH, roots))
        n = sl.stop - sl.start
        fill.append((np.full(n, EventKind.INIT, np.uint8), ids[sl], edges[sl], SPOUT))
    steady = []
    for b in range(steady_batches):
        new = slice(roots + b * PER_ROOT, roots + (b + 1) * PER_ROOT)
        bolt = slice(b * PER_ROOT, (b + 1) * PER_ROOT)
        parts_k = [np.full(PER_ROOT, EventKind.INIT, np.uint8), np.full(PER_ROOT, EventKind.ACK, np.uint8)]
        parts_r = [ids[new], ids[bolt]]
        parts_v = [edges[new], edges[bolt] ^ children[bolt]]
        if b >= LAG:
            child = slice((b - LAG) * PER_ROOT, (b - LAG + 1) * PER_ROOT)
            parts_k.append(np.full(PER_ROOT, EventKind.ACK, np.uint8))
            parts_r.append(ids[child])
            parts_v.append(children[child])
        kinds, rs, vs = np.concatenate(parts_k), np.concatenate(parts_r), np.concatenate(parts_v)
        mix = rng.permutation(len(rs))
        steady.append((kinds[mix], rs[mix], vs[mix], SPOUT))
    return fill, steady


class DictAcker:
    """The plain-Python reference point: Storm's acker over a dict root -> [val, owner, failed]."""

    def __init__(self) -> None:
        self.pending: dict[int, list] = {}

    def fold(self, kinds, roots, vals, *, sender, event_time_ms, offset):
        pending = self.pending
        decided = []
        for kind, root, val in zip(kinds.tolist(), roots.tolist(), vals.tolist()):
            entry = pending.get(root)
            if entry is None:
                entry = pending[root] = [0, None, False, event_time_ms, offset]
            if kind <= 1:
                entry[0] ^= val
                if kind == 0:
                    entry[1] = sender
            elif kind == 2:
                entry[2] = True
            else:
                entry[3] = event_time_ms
            if entry[1] is not None and (entry[2] or entry[0] == 0):
                del pending[root]
                decided.append((root, entry[1], 1 if entry[2] else 0))
        return decided


def run(table, batches, *, t0: int = 0, off0: int = 0, on_batch=None) -> tuple[float, int, int]:
    """Fold the batches one record a call; returns (CPU seconds, entries, decided)."""
    entries = decided = 0
    gc.collect()
    start = time.process_time()
    for i, (kinds, roots, vals, sender) in enumerate(batches):
        out = table.fold(kinds, roots, vals, sender=sender, event_time_ms=t0 + i, offset=off0 + i)
        entries += len(roots)
        decided += len(out)
        if on_batch is not None:
            on_batch(table)
    return time.process_time() - start, entries, decided


def run_grouped(table: AckerTable, batches, per_call: int, *, t0: int = 0, off0: int = 0) -> tuple[float, int, int]:
    """The same through AckerTable.fold_records, ``per_call`` records a call."""
    entries = decided = 0
    gc.collect()
    start = time.process_time()
    for first in range(0, len(batches), per_call):
        chunk = batches[first : first + per_call]
        records = [
            (kinds, roots, vals, sender, t0 + first + j, off0 + first + j)
            for j, (kinds, roots, vals, sender) in enumerate(chunk)
        ]
        decided += len(table.fold_records(records))
        entries += sum(len(r[1]) for r in records)
    return time.process_time() - start, entries, decided


def run_decoded(
    table, raw_records, per_call: int, *, t0: int = 0, off0: int = 0, codec_module=codec
) -> tuple[float, int, int]:
    """Decode each record value (codec.decode_ack_batch), then fold ``per_call`` records a call
    (``fold_records``; the dict folds them one by one), as the acker worker does."""
    entries = decided = 0
    gc.collect()
    start = time.process_time()
    for first in range(0, len(raw_records), per_call):
        records = []
        for j, raw in enumerate(raw_records[first : first + per_call]):
            batch = codec_module.decode_ack_batch(raw)
            records.append((batch.kinds, batch.roots, batch.vals, batch.sender, t0 + first + j, off0 + first + j))
            entries += len(batch)
        if not isinstance(table, DictAcker):
            decided += len(table.fold_records(records))
        else:
            for kinds, roots, vals, sender, t, offset in records:
                decided += len(table.fold(kinds, roots, vals, sender=sender, event_time_ms=t, offset=offset))
    return time.process_time() - start, entries, decided


class PassCounter:
    """Counts fold groups and passes over the table (``_apply`` calls) of one AckerTable class:
    a pass beyond the first of a group is a fallback (the entries after a decision folded
    again)."""

    def __init__(self, table_class) -> None:
        self.groups = self.passes = 0
        group, apply = table_class._fold_group, table_class._apply

        def counted_group(table, *args):
            self.groups += 1
            return group(table, *args)

        def counted_apply(table, *args):
            self.passes += 1
            return apply(table, *args)

        table_class._fold_group, table_class._apply = counted_group, counted_apply

        def restore() -> None:
            table_class._fold_group, table_class._apply = group, apply

        self._restore = restore

    def fallbacks(self) -> int:
        return self.passes - self.groups

    def close(self) -> None:
        self._restore()


def load_revision(revision: str):
    """(AckerTable class, codec module) of git revision ``revision``, imported from a copy of
    its package renamed ``rk_rev``, beside this code; the copy is removed when the bench exits."""
    root = pathlib.Path(__file__).resolve().parent.parent
    where = pathlib.Path(tempfile.mkdtemp(prefix="rk-bench-rev-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)  # the copy is needed until the bench ends
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", revision, "reliable_kafka"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    package = where / "rk_rev"
    (where / "reliable_kafka").rename(package)
    for path in package.rglob("*.py"):
        path.write_text(path.read_text().replace("reliable_kafka", "rk_rev"))
    sys.path.insert(0, str(where))
    table = importlib.import_module("rk_rev.core.acker_table").AckerTable
    return table, importlib.import_module("rk_rev.codec")


def fold_figures(table_class, codec_module, fill, failing, raw_failing, per_call: int) -> dict:
    """decode+fold and fold-only CPU seconds on the FAIL trace, from a filled table each, with
    fallback counts and bytes per pending root at the end."""
    figures = {}
    for what in ("decode+fold", "fold"):
        table = table_class()
        run_grouped(table, fill, per_call)
        counter = PassCounter(table_class)
        try:
            if what == "fold":
                seconds, entries, _ = run_grouped(table, failing, per_call, t0=len(fill), off0=len(fill))
            else:
                seconds, entries, _ = run_decoded(
                    table, raw_failing, per_call, t0=len(fill), off0=len(fill), codec_module=codec_module
                )
        finally:
            counter.close()
        figures[what] = entries / seconds / 1e6
        figures[what + " fallbacks"] = counter.fallbacks()
        figures["groups"] = counter.groups
        figures["bytes/root"] = table.nbytes / table.pending
        del table
        gc.collect()
    return figures


def interleaved(implementations: dict, fill, raw_failing, per_call: int) -> dict[str, float]:
    """decode+fold of the FAIL trace by every implementation from its own filled table, taking
    turns fold group by fold group (the order flips each group), so that all of them meet the same
    moments of machine load; M entries per CPU-second each. The tables share the caches, so the
    rates are lower than alone; the ratio is the steadier figure."""
    tables = {name: (table_class(), codec_module) for name, (table_class, codec_module) in implementations.items()}
    for table, _ in tables.values():
        run_grouped(table, fill, per_call)
    cpu = dict.fromkeys(tables, 0.0)
    names, t0 = list(tables), len(fill)
    entries = sum(len(codec.decode_ack_batch(raw)) for raw in raw_failing)
    gc.collect()
    for g, first in enumerate(range(0, len(raw_failing), per_call)):
        for name in names if g % 2 == 0 else names[::-1]:
            table, codec_module = tables[name]
            start = time.process_time()
            records = []
            for j, raw in enumerate(raw_failing[first : first + per_call]):
                batch = codec_module.decode_ack_batch(raw)
                records.append((batch.kinds, batch.roots, batch.vals, batch.sender, t0 + first + j, t0 + first + j))
            table.fold_records(records)
            cpu[name] += time.process_time() - start
    return {name: entries / cpu[name] / 1e6 for name in names}


def compare(revision: str, rounds: int, fill, failing, raw_failing, per_call: int) -> None:
    """This code against ``revision``, alternating, on the FAIL trace; CPU-second rates."""
    implementations: dict[str, tuple[Any, Any]] = {
        "this code": (AckerTable, codec),
        f"git {revision}": load_revision(revision),
    }
    results: dict[str, list[dict]] = {name: [] for name in implementations}
    load_before = os.getloadavg()
    for r in range(rounds):
        names = list(implementations)
        for name in names if r % 2 == 0 else names[::-1]:
            results[name].append(fold_figures(*implementations[name], fill, failing, raw_failing, per_call))
    print()
    print(
        f"FAIL trace, {per_call} records a call, {rounds} alternating rounds "
        "(median [min to max], M entries per CPU-second); load average (1, 5, 15 min) "
        + " before, ".join(", ".join(f"{x:.1f}" for x in load) for load in (load_before, os.getloadavg()))
        + " after:"
    )
    print(f"{'':<22}{'decode+fold':>26}{'fold alone':>26}{'fallbacks':>11}{'bytes/root':>12}")
    for name, rows in results.items():
        cells = []
        for key in ("decode+fold", "fold"):
            values = sorted(row[key] for row in rows)
            cells.append(f"{np.median(values):.2f} [{values[0]:.2f} to {values[-1]:.2f}]")
        fallbacks = max(max(row["decode+fold fallbacks"], row["fold fallbacks"]) for row in rows)
        print(
            f"{name:<22}{cells[0]:>26}{cells[1]:>26}"
            f"{fallbacks:>5} / {rows[0]['groups']:<4}{rows[-1]['bytes/root']:>9.1f}"
        )
    base, this = results[f"git {revision}"], results["this code"]
    for key in ("decode+fold", "fold"):
        ratios = sorted(a[key] / b[key] for a, b in zip(this, base))
        print(
            f"  this code / git {revision}, {key}: {np.median(ratios):.2f}x "
            f"[{ratios[0]:.2f} to {ratios[-1]:.2f}] (per round)"
        )
    turns = [interleaved(implementations, fill, raw_failing, per_call) for _ in range(rounds)]
    ratios = sorted(t["this code"] / t[f"git {revision}"] for t in turns)
    print(
        f"  taking turns fold group by fold group, decode+fold ({rounds} passes, tables sharing the caches): "
        + ", ".join(f"{name} {np.median([t[name] for t in turns]):.2f}" for name in implementations)
        + f"; this code / git {revision} {np.median(ratios):.2f}x [{ratios[0]:.2f} to {ratios[-1]:.2f}]"
    )


def dict_bytes_per_root(fill_batches) -> float:
    """Bytes per pending root of DictAcker, measured with tracemalloc over a fill."""
    gc.collect()
    tracemalloc.start()
    acker = DictAcker()
    base = tracemalloc.get_traced_memory()[0]
    for i, (kinds, roots, vals, sender) in enumerate(fill_batches):
        acker.fold(kinds, roots, vals, sender=sender, event_time_ms=i, offset=i)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / max(1, len(acker.pending))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=1_000_000, help="pending roots (default 1M)")
    parser.add_argument(
        "--steady-batches", type=int, default=None, help="steady-phase batches (default: 2 * roots / 500, at most 4000)"
    )
    parser.add_argument(
        "--records-per-call", type=int, default=16, help="records per AckerTable.fold_records call (default 16)"
    )
    parser.add_argument(
        "--dict-memory-roots",
        type=int,
        default=200_000,
        help="roots for the dict's tracemalloc measurement (default 200k)",
    )
    parser.add_argument(
        "--fail-rate",
        type=float,
        default=0.001,
        help="share of completing child ACKs turned into FAIL + sibling ACK (default 0.001)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also fold the FAIL trace with git revision REV's table and codec, alternating with this code",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds with --baseline (default 3)")
    parser.add_argument("--only-fail-trace", action="store_true", help="skip the fill, steady and dict figures")
    args = parser.parse_args()
    steady_batches = args.steady_batches or max(LAG + 10, min(4000, 2 * args.roots // BATCH))
    per_call = args.records_per_call

    fill, steady = build_workload(args.roots, steady_batches, args.seed)
    print(
        f"workload: fill {args.roots:,} roots in {len(fill):,} INIT records of {BATCH}; "
        f"steady {len(steady):,} mixed records (~{PER_ROOT} roots started and finished each)"
    )
    print("rates are entries per CPU second of this process (the machine is shared)")
    failing = with_fails(steady, args.fail_rate, args.seed)
    raw_failing = encoded(failing)
    n_fails = sum(int(np.count_nonzero(k == EventKind.FAIL)) for k, _, _, _ in failing)
    print(
        f"FAIL trace: {n_fails:,} of the steady trace's child ACKs ({args.fail_rate:.1%}) are a "
        "FAIL, a sibling's ACK for the root follows in the next record"
    )
    if args.only_fail_trace:
        if args.baseline:
            compare(args.baseline, args.rounds, fill, failing, raw_failing, per_call)
        else:
            fail_figures = fold_figures(AckerTable, codec, fill, failing, raw_failing, per_call)
            print(", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in fail_figures.items()))
        return

    # --- NumPy table: bytes per root while it grows (untimed), then timed runs.
    sizing = AckerTable()
    marks = sorted({int(args.roots * f) for f in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0)})
    fill_levels: list[tuple[int, int, float]] = []
    working: list[float] = []

    def watch(t: AckerTable) -> None:
        if t.pending >= 16_384:
            working.append(t.nbytes / t.pending)
        while marks and t.pending >= marks[0]:
            fill_levels.append((t.pending, t.capacity, t.nbytes / t.pending))
            marks.pop(0)

    run(sizing, fill, on_batch=watch)
    del sizing

    one = AckerTable()
    np_fill = run(one, fill)
    np_steady = run(one, steady, t0=len(fill), off0=len(fill))
    steady_bytes, steady_pending = one.nbytes / one.pending, one.pending
    start = time.process_time()
    expired = one.advance(10**9)
    expire_s = time.process_time() - start
    rebuilds = one.stats.rebuilds
    del one
    grouped = AckerTable()
    np_fill_grouped = run_grouped(grouped, fill, per_call)
    np_steady_grouped = run_grouped(grouped, steady, per_call, t0=len(fill), off0=len(fill))
    grouped_pending = grouped.pending
    del grouped

    # --- dict implementation on the same records.
    acker = DictAcker()
    d_fill = run(acker, fill)
    d_steady = run(acker, steady, t0=len(fill), off0=len(fill))
    d_pending = len(acker.pending)
    del acker
    gc.collect()
    d_bytes = dict_bytes_per_root(fill[: max(1, args.dict_memory_roots // BATCH)])

    # --- the steady trace with FAILs: folded, and decoded from record values then folded.
    on_fail: dict[tuple[str, bool], tuple[float, int, int]] = {}
    fallbacks: dict[tuple[str, bool], tuple[int, int]] = {}
    for name, make in (("dict", DictAcker), ("fold", AckerTable), ("grouped", AckerTable)):
        for decode in (False, True) if name != "fold" else (False,):
            impl: Any = make()
            if isinstance(impl, AckerTable):
                run_grouped(impl, fill, per_call)
            else:
                run(impl, fill)
            t0 = off0 = len(fill)
            counter = PassCounter(AckerTable)
            if decode:
                result = run_decoded(impl, raw_failing, per_call, t0=t0, off0=off0)
            elif name == "grouped":
                result = run_grouped(impl, failing, per_call, t0=t0, off0=off0)
            else:
                result = run(impl, failing, t0=t0, off0=off0)
            counter.close()
            on_fail[name, decode] = result
            fallbacks[name, decode] = (counter.fallbacks(), counter.groups)
            del impl
            gc.collect()

    def rate(r):
        return r[1] / r[0] / 1e6

    print()
    print(f"{'M entries/s (CPU)':<44}{'fill (INIT)':>12}{'steady':>10}{'with FAILs':>12}{'decode+fold':>13}")
    rows = (
        ("dict, Storm's loop (XOR + owner only)", d_fill, d_steady, on_fail["dict", False], on_fail["dict", True]),
        ("AckerTable.fold, one record a call", np_fill, np_steady, on_fail["fold", False], None),
        (
            f"AckerTable.fold_records, {per_call} records a call",
            np_fill_grouped,
            np_steady_grouped,
            on_fail["grouped", False],
            on_fail["grouped", True],
        ),
    )
    for name, *figures in rows:
        print(
            f"{name:<44}"
            + "".join(f"{rate(f) if f else float('nan'):>{w}.2f}" for f, w in zip(figures, (12, 10, 12, 13)))
        )
    for name, *figures in rows[1:]:
        print(
            f"{'  ratio to dict: ' + name.split(',')[0]:<44}"
            + "".join(
                f"{rate(f) / rate(d) if f else float('nan'):>{w - 1}.1f}x"
                for f, d, w in zip(figures, rows[0][1:], (12, 10, 12, 13))
            )
        )
    print(
        f"decided in the steady phase: {np_steady[2]:,} / {np_steady_grouped[2]:,} / "
        f"dict {d_steady[2]:,}; pending after: {steady_pending:,} / {grouped_pending:,} / "
        f"dict {d_pending:,}"
    )
    print(
        "fallbacks (extra passes over the table) on the FAIL trace: "
        + ", ".join(
            f"{name}{' decode+fold' if decode else ''} {n} of {groups} groups"
            for (name, decode), (n, groups) in fallbacks.items()
            if name != "dict"
        )
    )
    print(f"expire all {len(expired):,} pending roots in one advance(): {expire_s * 1e3:.0f} ms")
    print()
    print(f"{'pending roots':>14}{'slots':>12}{'bytes/root':>12}   (AckerTable while filling)")
    for pending, capacity, per_root in fill_levels:
        print(f"{pending:>14,}{capacity:>12,}{per_root:>12.1f}")
    if working:
        print(
            f"working range (>= 16,384 pending, after every record): bytes/root "
            f"min {min(working):.1f}, max {max(working):.1f}, mean {np.mean(working):.1f}"
        )
    print(f"steady phase end: {steady_bytes:.1f} bytes/root at {steady_pending:,} pending ({rebuilds} rebuilds in all)")
    print(
        f"dict implementation: {d_bytes:.0f} bytes/root (tracemalloc, "
        f"{min(args.dict_memory_roots, args.roots):,} roots); "
        f"{d_bytes / steady_bytes:.1f}x the table's"
    )
    if args.baseline:
        compare(args.baseline, args.rounds, fill, failing, raw_failing, per_call)


if __name__ == "__main__":
    main()
