package reliablekafka.spark;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.types.DataTypes;

/**
 * reliable-kafka's per-row work on Spark's side of the output path (reliable_kafka.spark.writer,
 * DESIGN 7.2), where Spark SQL has no cheap built-in: a long as 8 big-endian bytes (ANSI mode
 * refuses CAST(bigint AS binary)) and a per-key XOR that an observation can carry to the driver.
 *
 * <ul>
 *   <li>{@code rk_anchors_v2(root bigint, edge bigint) -> binary}: the one-pair {@code rk-anchors}
 *       v2 header, 0x02 0x20 root edge (18 bytes); null when root is null or 0 (untracked).
 *   <li>{@code rk_child_header(salt binary, row bigint, anchors array<struct<root, edge>>) -> binary}:
 *       the v2 header of an output row with any number of pairs: per distinct non-zero root, in
 *       order of first appearance, the child edge {@code xxhash64(salt, row, root, 3)} (0 replaced),
 *       exactly as the SQL expressions of reliable_kafka.spark.writer derive it; null without roots.
 *   <li>{@code rk_child_xor(header binary) -> binary}: aggregate over v2 headers of any number of
 *       pairs: one (root, XOR of its edges) pair per distinct root, big-endian int64s; nulls are
 *       skipped, no rows give zero bytes.
 * </ul>
 */
public final class ReliableKafkaFunctions {
    public static final String ANCHORS_V2 = "rk_anchors_v2";
    public static final String CHILD_HEADER = "rk_child_header";
    public static final String CHILD_XOR = "rk_child_xor";

    // reliable_kafka.spark.derive: CHILD_TAG, ZERO_REPLACEMENT; Spark's xxhash64 seed
    static final int CHILD_TAG = 3;
    static final long ZERO_REPLACEMENT = 0x2545F4914F6CDD1DL;
    static final long SPARK_SEED = 42L;

    private static final Map<SparkSession, Boolean> REGISTERED =
            Collections.synchronizedMap(new WeakHashMap<>());

    private ReliableKafkaFunctions() {}

    /**
     * Registers the functions as temporary functions of {@code spark}, once per session: a
     * session cloned from one that has them (a streaming query's) has them already.
     */
    public static boolean register(SparkSession spark) {
        if (REGISTERED.containsKey(spark)) {
            return false;
        }
        if (spark.catalog().functionExists(ANCHORS_V2)
                && spark.catalog().functionExists(CHILD_HEADER)
                && spark.catalog().functionExists(CHILD_XOR)) {
            REGISTERED.put(spark, Boolean.TRUE);
            return false;
        }
        UDF2<Long, Long, byte[]> header = ReliableKafkaFunctions::anchorsHeader;
        spark.udf().register(ANCHORS_V2, header, DataTypes.BinaryType);
        UDF3<byte[], Long, scala.collection.Seq<Row>, byte[]> children = ReliableKafkaFunctions::childHeader;
        spark.udf().register(CHILD_HEADER, children, DataTypes.BinaryType);
        // a Catalyst aggregate (ChildXor), registered as Spark registers its own Aggregator UDAFs
        ((org.apache.spark.sql.classic.SparkSession) spark)
                .sessionState()
                .functionRegistry()
                .createOrReplaceTempFunction(CHILD_XOR, ChildXor::build, "java_udf");
        REGISTERED.put(spark, Boolean.TRUE);
        return true;
    }

    /** The v2 header of one (root, edge) pair; null for a missing or zero root. */
    public static byte[] anchorsHeader(Long root, Long edge) {
        if (root == null || root == 0L || edge == null) {
            return null;
        }
        byte[] out = new byte[18];
        out[0] = 2;
        out[1] = 32; // zigzag varint of 16, the body's length
        putLong(out, 2, root);
        putLong(out, 10, edge);
        return out;
    }

    /**
     * The v2 header of an output row's child edges, one per distinct non-zero root of
     * {@code anchors}; null when there is none. {@code salt}: the batch's salt as 8 little-endian
     * bytes (as reliable_kafka.spark.derive.salt_sql passes it; xxhash64 hashes them as the long).
     */
    public static byte[] childHeader(byte[] salt, Long row, scala.collection.Seq<Row> anchors) {
        if (anchors == null || anchors.isEmpty() || salt == null || salt.length != 8 || row == null) {
            return null;
        }
        int n = anchors.size();
        long[] roots = new long[n];
        int distinct = 0;
        RootXors seen = n > 16 ? new RootXors() : null; // many roots (an aggregate's output): no scan
        scala.collection.Iterator<Row> pairs = anchors.iterator();
        while (pairs.hasNext()) {
            Row pair = pairs.next();
            if (pair == null || pair.isNullAt(0)) {
                continue;
            }
            long root = pair.getLong(0);
            if (root == 0L || (seen == null ? contains(roots, distinct, root) : !seen.add(root))) {
                continue;
            }
            roots[distinct++] = root;
        }
        if (distinct == 0) {
            return null;
        }
        long seed = XXH64.hashLong(row, XXH64.hashLong(littleEndianLong(salt), SPARK_SEED));
        byte[] body = new byte[16 * distinct];
        for (int i = 0; i < distinct; i++) {
            putLong(body, 16 * i, roots[i]);
            putLong(body, 16 * i + 8, childEdge(seed, roots[i]));
        }
        return header(body);
    }

    /** {@code xxhash64(salt, row, root, CHILD_TAG)}, 0 replaced, from the hash of (salt, row). */
    static long childEdge(long saltRowHash, long root) {
        long edge = XXH64.hashInt(CHILD_TAG, XXH64.hashLong(root, saltRowHash));
        return edge != 0L ? edge : ZERO_REPLACEMENT;
    }

    /** 0x02, the zigzag varint of the body's length (Avro bytes), the body. */
    static byte[] header(byte[] body) {
        long zigzag = 2L * body.length;
        byte[] prefix = new byte[11];
        int at = 0;
        prefix[at++] = 2;
        while ((zigzag & ~0x7FL) != 0) {
            prefix[at++] = (byte) ((zigzag & 0x7F) | 0x80);
            zigzag >>>= 7;
        }
        prefix[at++] = (byte) zigzag;
        byte[] out = new byte[at + body.length];
        System.arraycopy(prefix, 0, out, 0, at);
        System.arraycopy(body, 0, out, at, body.length);
        return out;
    }

    private static boolean contains(long[] values, int n, long value) {
        for (int i = 0; i < n; i++) { // a row has few roots: a scan beats a set
            if (values[i] == value) {
                return true;
            }
        }
        return false;
    }

    static long littleEndianLong(byte[] in) {
        long value = 0;
        for (int i = 7; i >= 0; i--) {
            value = (value << 8) | (in[i] & 0xFFL);
        }
        return value;
    }

    static void putLong(byte[] out, int at, long value) {
        for (int i = 7; i >= 0; i--) {
            out[at + i] = (byte) value;
            value >>>= 8;
        }
    }

    static long getLong(byte[] in, int at) {
        long value = 0;
        for (int i = 0; i < 8; i++) {
            value = (value << 8) | (in[at + i] & 0xFFL);
        }
        return value;
    }
}
