"""What the trace's root index costs a spout: RootIndex.add per root and send per poll round.

Run: ./rk bench root_index   (prints CPU microseconds per root; the producer is a stub that keeps
nothing, so the figure is the spout-side work: librdkafka's copy of 16 bytes a root comes on top)
"""

from __future__ import annotations

import random
import time

from reliable_kafka.spout.root_index import RootIndex


class _Stub:
    def produce(self, topic, value, key):
        self.bytes = len(value)


def main(rounds: int = 2000, batch: int = 500) -> None:
    stub = _Stub()
    index = RootIndex(stub, topic="t.roots", spout_id=7)
    roots = [random.getrandbits(63) for _ in range(batch)]
    tp = ("orders", 3)
    started = time.process_time()
    for r in range(rounds):
        base = r * batch
        for i, root in enumerate(roots):
            index.add(tp, base + i, root)
        index.send()
    cpu = time.process_time() - started
    print(
        f"root index: {cpu / (rounds * batch) * 1e6:.3f} CPU us per root "
        f"({rounds} rounds of {batch}; {stub.bytes} bytes a record, {stub.bytes / batch:.1f} bytes a root)"
    )


if __name__ == "__main__":
    main()
