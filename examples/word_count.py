"""Storm's word count on Kafka: a spout on `sentences`, a split bolt writing `words`, a count bolt.

Every sentence is the root of a tree whose children are its words; the spout commits a sentence's
offset only once all its words were counted, and replays it if a word failed or timed out.
Run:  .venv/bin/python examples/word_count.py   (an embedded broker, 1,000 sentences, the counts)
"""

from collections import Counter

from reliable_kafka import AckerWorker, BasicBolt, Spout, Tracking


def build(bootstrap, *, topology="wordcount", sentences="sentences", words="words", tracking=None):
    """The components; ``tracking`` is the spout's (its timeout is the ackers' too)."""
    tracking = tracking or Tracking()
    counts = Counter()

    def split(sentence, collector):
        for word in sentence.value.decode().split():
            collector.emit(words, word.encode(), key=word.encode())

    def count(word, collector):
        counts[word.value.decode()] += 1

    on = {"topology": topology, "connection": bootstrap}
    return counts, [
        AckerWorker(**on, tracking=Tracking(ackers=2, message_timeout_ms=tracking.message_timeout_ms)),
        Spout(
            **on,
            source_topics=sentences,
            group_id=f"{topology}-spout",
            emit_to=f"{topology}.sentences",
            tracking=tracking,
        ),
        BasicBolt(**on, source_topics=f"{topology}.sentences", group_id=f"{topology}-split", handler=split),
        BasicBolt(**on, source_topics=words, group_id=f"{topology}-count", handler=count),
    ]


if __name__ == "__main__":
    from reliable_kafka import LocalCluster
    from reliable_kafka.broker import EmbeddedKafka
    from reliable_kafka.demo import SENTENCES
    from reliable_kafka.offsets import committed_offsets, end_offsets
    from reliable_kafka.testing.records import produce_values
    from reliable_kafka.testing.topics import create_topics

    with EmbeddedKafka() as kafka:
        bootstrap = kafka.bootstrap_servers
        create_topics(bootstrap, {"sentences": 2, "words": 2, "wordcount.sentences": 2})
        produce_values(bootstrap, "sentences", [SENTENCES[i % 5].encode() for i in range(1000)])
        counts, components = build(bootstrap)
        with LocalCluster(*components) as cluster:
            cluster.wait_until(
                lambda: (
                    committed_offsets(bootstrap, "wordcount-spout", "sentences") == end_offsets(bootstrap, "sentences")
                ),
                timeout=300,  # seconds on an idle machine; a busy one may need minutes
                what="all sentences done",
                progress=lambda: (
                    f"committed {committed_offsets(bootstrap, 'wordcount-spout', 'sentences')}, "
                    f"spout {components[1].stats}, tracker {components[1].tracker.stats}"
                ),
            )
        print(dict(counts.most_common()))
