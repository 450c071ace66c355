"""Storm's word count on Kafka: a spout on `sentences`, a split bolt writing `words`, a count bolt.

Every sentence is the root of a tree whose children are its words; the spout commits a sentence's
offset only once all its words were counted, and replays it if a word failed or timed out.
Run:  ./rk example word_count   (starts an embedded broker, writes sentences, counts them)
"""

from collections import Counter

from reliable_kafka import AckerWorker, BasicBolt, Spout


def build(bootstrap, *, topology="wordcount", sentences="sentences", words="words", timeout_ms=30_000, **spout_options):
    counts = Counter()

    def split(sentence, collector):
        for word in sentence.value.decode().split():
            collector.emit(words, word.encode(), key=word.encode())

    def count(word, collector):
        counts[word.value.decode()] += 1

    on = {"topology": topology, "bootstrap_servers": bootstrap}
    return counts, [
        AckerWorker(**on, ackers=2, timeout_ms=timeout_ms),
        Spout(**on, source_topics=sentences, group_id=f"{topology}-spout", emit_to=f"{topology}.sentences",
              message_timeout_ms=timeout_ms, **spout_options),
        BasicBolt(**on, source_topics=f"{topology}.sentences", group_id=f"{topology}-split", handler=split),
        BasicBolt(**on, source_topics=words, group_id=f"{topology}-count", handler=count),
    ]
