package reliablekafka.spark;

import java.io.ByteArrayOutputStream;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.SplittableRandom;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The rows one task of a single-query Spark spout writes (docs/spark.md, "One streaming query"):
 * each output row with its {@code rk-anchors} header and, after each source record's rows, that
 * record's INIT in an AckBatch record for its ack partition. Public Dataset API only
 * ({@code Dataset.mapPartitions} with {@code Encoders.row}); one projection after it names each
 * row's topic and builds its headers in Spark's generated code. It uses nothing else of Spark's, so
 * it does not tie the single query to one Spark version.
 *
 * <p>Input rows: {@code key binary, value binary, root bigint, rk_fail boolean} and, when the
 * outputs have headers of their own, {@code headers} (passed through). The plan is row-wise
 * (checked by the driver before the query starts): the rows one source record made come together,
 * in one task, and each carries that record's root (0: untracked; a row anchored to two records
 * fails its task in the projection before this one, {@code single_query.tracked_rows}). Output
 * rows: {@code ack_partition int} (null for an output), {@code key, value, rk_header binary} (the
 * {@code rk-anchors} value) and the headers.
 *
 * <p>Each output row gets a child edge drawn at random for this task attempt (never derived: two
 * attempts must never send the same INIT, or the second would cancel the first). When the root
 * changes (or the input ends) the finished record's {@code INIT(root, XOR of its child edges)} is
 * queued, with {@code FAIL(root)} beside it if one of its rows had {@code rk_fail}: the tree cannot
 * complete before every child edge in that INIT was acked downstream, and the INIT sets the owner
 * at once, so no entry of the tree waits ownerless at the acker. Queued entries are written as one
 * AckBatch record per ack partition when {@link #MAX_ENTRIES} are queued, when the oldest has waited
 * {@code flushNanos} (checked at each input row: real-time mode), or when the input ends.
 */
public final class TrackedRows implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 1L;
    static final int MAX_ENTRIES = 10_000;
    static final byte INIT = 0;
    static final byte FAIL = 2;
    static final int HEADER_BYTES = 18; // a one-pair rk-anchors v2 value: version, length, root, edge
    private static final SplittableRandom SEEDS = new SplittableRandom(new SecureRandom().nextLong());

    private final int ackPartitions;
    private final long sender;
    private final boolean headers;
    private final long flushNanos;

    /**
     * @param ackPartitions the ack topic's partitions (a root's partition: root mod N, unsigned)
     * @param sender the driver's task id: the roots' owner, to which the ackers send outcomes
     * @param headers whether the input rows carry the outputs' own headers (column 4)
     * @param flushNanos queued entries are written once the oldest has waited this long; 0: only
     *     when {@link #MAX_ENTRIES} are queued or the input ends
     */
    public TrackedRows(int ackPartitions, long sender, boolean headers, long flushNanos) {
        if (ackPartitions < 1) {
            throw new IllegalArgumentException("ackPartitions must be >= 1, got " + ackPartitions);
        }
        this.ackPartitions = ackPartitions;
        this.sender = sender;
        this.headers = headers;
        this.flushNanos = flushNanos;
    }

    /** A generator of child edges for one task attempt, independent of every other attempt's. */
    static SplittableRandom attemptEdges() {
        synchronized (SEEDS) {
            return SEEDS.split();
        }
    }

    @Override
    public Iterator<Row> call(Iterator<Row> input) {
        return new Rows(input, attemptEdges());
    }

    /** The output rows as they are read, with the ack records between them. */
    private final class Rows implements Iterator<Row> {
        private final Iterator<Row> input;
        private final SplittableRandom edges;
        private final Entries entries = new Entries(ackPartitions);
        private final ArrayDeque<Row> ready = new ArrayDeque<>();
        private long root; // the record whose rows are being read; 0: none
        private long xor;
        private boolean failed;
        private boolean ended;

        Rows(Iterator<Row> input, SplittableRandom edges) {
            this.input = input;
            this.edges = edges;
        }

        @Override
        public boolean hasNext() {
            while (ready.isEmpty()) {
                if (ended) {
                    return false;
                }
                if (input.hasNext()) {
                    Row out = output(input.next());
                    if (out != null) {
                        ready.add(out);
                    }
                    if (flushNanos > 0 && entries.waited(System.nanoTime()) >= flushNanos) {
                        entries.drainTo(ready, sender, headers);
                    }
                } else {
                    finishRecord();
                    entries.drainTo(ready, sender, headers);
                    ended = true;
                }
            }
            return true;
        }

        @Override
        public Row next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            return ready.poll();
        }

        /** The output row for {@code row}, or null (a failed row, or one without a root). */
        private Row output(Row row) {
            long rowRoot = row.getLong(2);
            if (rowRoot != 0L && rowRoot != root) { // an untracked row belongs to no record: it ends none
                finishRecord();
                root = rowRoot;
            }
            if (!row.isNullAt(3) && row.getBoolean(3)) {
                failed |= rowRoot != 0L;
                return null;
            }
            byte[] header = null;
            if (rowRoot != 0L) {
                long edge = edges.nextLong();
                while (edge == 0L) {
                    edge = edges.nextLong();
                }
                xor ^= edge;
                header = new byte[HEADER_BYTES];
                int pos = header(header, 1);
                putLongBE(header, pos, rowRoot);
                putLongBE(header, pos + 8, edge);
            }
            Object key = row.isNullAt(0) ? null : row.get(0);
            Object data = row.isNullAt(1) ? null : row.get(1);
            return headers
                    ? RowFactory.create(null, key, data, header, row.isNullAt(4) ? null : row.get(4))
                    : RowFactory.create(null, key, data, header);
        }

        /** Queues the finished record's INIT (and FAIL); its rows are all read. */
        private void finishRecord() {
            if (root != 0L) {
                int partition = (int) Long.remainderUnsigned(root, ackPartitions);
                if (failed) {
                    entries.add(partition, FAIL, root, 0L, System.nanoTime());
                }
                entries.add(partition, INIT, root, xor, System.nanoTime());
                if (entries.size() >= MAX_ENTRIES) {
                    entries.drainTo(ready, sender, headers);
                }
            }
            root = 0L;
            xor = 0L;
            failed = false;
        }
    }

    /** The queued ack entries, per ack partition, and when the oldest was queued. */
    static final class Entries {
        private final byte[][] kinds;
        private final long[][] roots;
        private final long[][] vals;
        private final int[] counts;
        private int size;
        private long oldest;

        Entries(int partitions) {
            kinds = new byte[partitions][16];
            roots = new long[partitions][16];
            vals = new long[partitions][16];
            counts = new int[partitions];
        }

        int size() {
            return size;
        }

        long waited(long now) {
            return size == 0 ? 0L : now - oldest;
        }

        void add(int partition, byte kind, long root, long val, long now) {
            int n = counts[partition];
            if (n == roots[partition].length) {
                kinds[partition] = Arrays.copyOf(kinds[partition], 2 * n);
                roots[partition] = Arrays.copyOf(roots[partition], 2 * n);
                vals[partition] = Arrays.copyOf(vals[partition], 2 * n);
            }
            kinds[partition][n] = kind;
            roots[partition][n] = root;
            vals[partition][n] = val;
            counts[partition] = n + 1;
            if (size++ == 0) {
                oldest = now;
            }
        }

        /** One AckBatch row per ack partition with entries; empties the queue. */
        void drainTo(ArrayDeque<Row> out, long sender, boolean headers) {
            for (int p = 0; p < counts.length; p++) {
                if (counts[p] == 0) {
                    continue;
                }
                byte[] batch = ackBatch(sender, counts[p], kinds[p], roots[p], vals[p]);
                out.add(headers ? RowFactory.create(p, null, batch, null, null) : RowFactory.create(p, null, batch, null));
                counts[p] = 0;
            }
            size = 0;
        }
    }

    /** The v2 header's prefix for {@code n} pairs (version 2, the Avro length of 16n bytes); the body's offset. */
    static int header(byte[] value, int n) {
        value[0] = 2;
        return 1 + putVarint(value, 1, 2L * 16 * n);
    }

    /** One AckBatch record's value (ack_batch.avsc): format byte 1, then sender, count, kinds, roots, vals. */
    static byte[] ackBatch(long sender, int n, byte[] kinds, long[] roots, long[] vals) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(32 + 17 * n);
        out.write(1);
        byte[] scratch = new byte[10];
        out.write(scratch, 0, putVarint(scratch, 0, zigzag(sender)));
        out.write(scratch, 0, putVarint(scratch, 0, zigzag(n)));
        out.write(scratch, 0, putVarint(scratch, 0, zigzag(n)));
        out.write(kinds, 0, n);
        byte[] column = new byte[8 * n];
        for (long[] values : new long[][] {roots, vals}) {
            for (int i = 0; i < n; i++) {
                putLongLE(column, 8 * i, values[i]);
            }
            out.write(scratch, 0, putVarint(scratch, 0, zigzag(8L * n)));
            out.write(column, 0, 8 * n);
        }
        return out.toByteArray();
    }

    static long zigzag(long value) {
        return (value << 1) ^ (value >> 63);
    }

    /** An Avro varint of the already zigzagged {@code value} at {@code at}; the bytes written. */
    static int putVarint(byte[] out, int at, long value) {
        int n = 0;
        while ((value & ~0x7FL) != 0L) {
            out[at + n++] = (byte) ((value & 0x7F) | 0x80);
            value >>>= 7;
        }
        out[at + n++] = (byte) value;
        return n;
    }

    static void putLongBE(byte[] out, int at, long value) {
        for (int i = 0; i < 8; i++) {
            out[at + i] = (byte) (value >>> (56 - 8 * i));
        }
    }

    static void putLongLE(byte[] out, int at, long value) {
        for (int i = 0; i < 8; i++) {
            out[at + i] = (byte) (value >>> (8 * i));
        }
    }
}
