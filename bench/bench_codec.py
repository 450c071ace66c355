"""rk-anchors header cost per tuple: version 1 (Avro array, fastavro) against version 2 (Avro
bytes of big-endian pairs, struct), side by side in one run; then an ack batch's decode, read in
place (as the acker does) against fastavro's reading of the same bytes.

Each figure is microseconds of CPU time of this process per call (encode or decode one header),
best of ``--repeat`` rounds of ``--calls`` calls, for tuples in 1, 2 and 8 trees. Prints figures,
asserts nothing. Usage: ``./rk bench codec [--calls N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from reliable_kafka import codec
from reliable_kafka.codec import anchors as anchors_codec


def per_call_us(function, argument, calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            function(argument)
        best = min(best, time.process_time() - start)
    return best / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)
    print("us of CPU per header (best of rounds); the machine is shared, so figures wander")
    print(
        f"{'pairs':>6}{'encode v1':>12}{'encode v2':>12}{'ratio':>8}"
        f"{'decode v1':>12}{'decode v2':>12}{'ratio':>8}{'bytes v1/v2':>14}"
    )
    for pairs in (1, 2, 8):
        anchors = {rng.getrandbits(63) + 1: rng.getrandbits(63) - 2**62 for _ in range(pairs)}
        raw1, raw2 = anchors_codec._encode_anchors_v1(anchors), codec.encode_anchors(anchors)
        assert codec.decode_anchors(raw1) == codec.decode_anchors(raw2) == anchors
        e1 = per_call_us(anchors_codec._encode_anchors_v1, anchors, args.calls, args.repeat)
        e2 = per_call_us(codec.encode_anchors, anchors, args.calls, args.repeat)
        d1 = per_call_us(codec.decode_anchors, raw1, args.calls, args.repeat)
        d2 = per_call_us(codec.decode_anchors, raw2, args.calls, args.repeat)
        print(
            f"{pairs:>6}{e1:>12.2f}{e2:>12.2f}{e1 / e2:>7.1f}x"
            f"{d1:>12.2f}{d2:>12.2f}{d1 / d2:>7.1f}x{len(raw1):>8}/{len(raw2)}"
        )
    print()
    print("us of CPU per ack batch record (best of rounds)")
    print(f"{'entries':>8}{'in place':>12}{'fastavro':>12}{'ratio':>8}{'M entries/s in place':>24}")
    rng_np = np.random.default_rng(1)
    for entries in (1, 50, 500):
        raw = codec.encode_ack_batch(
            rng.getrandbits(63),
            rng_np.integers(0, 4, entries),
            rng_np.integers(1, 2**63 - 1, entries),
            rng_np.integers(-(2**63), 2**63 - 1, entries),
        )
        calls = max(1000, args.calls // 5)
        fast = per_call_us(codec.decode_ack_batch, raw, calls, args.repeat)
        # bytes that are not a ``bytes`` object take fastavro's path (as before reading in place)
        slow = per_call_us(codec.decode_ack_batch, bytearray(raw), calls, args.repeat)
        print(f"{entries:>8}{fast:>12.2f}{slow:>12.2f}{slow / fast:>7.1f}x{entries / fast:>24.1f}")


if __name__ == "__main__":
    main()
