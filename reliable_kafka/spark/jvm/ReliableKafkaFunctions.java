package reliablekafka.spark;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.Platform;

/**
 * reliable-kafka's per-row work on Spark's side of the output path (reliable_kafka.spark.writer,
 * docs/design.md section 7.2), where Spark SQL has no cheap built-in: a long as 8 big-endian bytes (ANSI mode
 * refuses CAST(bigint AS binary)) and a per-key XOR that an observation can carry to the driver.
 *
 * <ul>
 *   <li>{@code rk_anchors_v2(root bigint, edge bigint) -> binary}: the one-pair {@code rk-anchors}
 *       v2 header, 0x02 0x20 root edge (18 bytes); null when root is null or 0 (untracked).
 *   <li>{@code rk_child_header(salt binary, row bigint, anchors array<struct<root, edge>>) -> binary}:
 *       the v2 header of an output row with any number of pairs: per distinct non-zero root, in
 *       order of first appearance, the child edge {@code xxhash64(salt, row, root, 3)} (0 replaced),
 *       exactly as the SQL expressions of reliable_kafka.spark.writer derive it; null without roots.
 *   <li>{@code rk_output_header(salt binary, row bigint, anchors array<struct<root, edge>>) -> binary}:
 *       the same bytes as {@code rk_child_header}, as a Catalyst {@code StaticInvoke}: Spark's
 *       generated code calls {@link #outputHeader} with the row's own values (primitives and the
 *       anchors as {@code ArrayData}), where a UDF boxes its arguments and converts the anchors to
 *       Scala Rows; one call for any number of pairs, each child edge hashed once.
 *   <li>{@code rk_child_xor(header binary) -> binary}: aggregate over v2 headers of any number of
 *       pairs: one (root, XOR of its edges) pair per distinct root, big-endian int64s; nulls are
 *       skipped, no rows give zero bytes.
 * </ul>
 */
public final class ReliableKafkaFunctions {
    public static final String ANCHORS_V2 = "rk_anchors_v2";
    public static final String CHILD_HEADER = "rk_child_header";
    public static final String CHILD_XOR = "rk_child_xor";
    public static final String OUTPUT_HEADER = "rk_output_header";
    static final DataType ANCHORS_TYPE = DataType.fromDDL("array<struct<root:bigint,edge:bigint>>");

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
                && spark.catalog().functionExists(CHILD_XOR)
                && spark.catalog().functionExists(OUTPUT_HEADER)) {
            REGISTERED.put(spark, Boolean.TRUE);
            return false;
        }
        UDF2<Long, Long, byte[]> header = ReliableKafkaFunctions::anchorsHeader;
        spark.udf().register(ANCHORS_V2, header, DataTypes.BinaryType);
        UDF3<byte[], Long, scala.collection.Seq<Row>, byte[]> children = ReliableKafkaFunctions::childHeader;
        spark.udf().register(CHILD_HEADER, children, DataTypes.BinaryType);
        // Catalyst expressions of our own, registered as Spark registers its own Aggregator UDAFs
        org.apache.spark.sql.catalyst.analysis.FunctionRegistry registry =
                ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry();
        registry.createOrReplaceTempFunction(CHILD_XOR, ChildXor::build, "java_udf");
        registry.createOrReplaceTempFunction(OUTPUT_HEADER, ReliableKafkaFunctions::buildOutputHeader, "java_udf");
        REGISTERED.put(spark, Boolean.TRUE);
        return true;
    }

    /** The function registry's builder of {@code rk_output_header}: a static call to {@link #outputHeader}. */
    static Expression buildOutputHeader(scala.collection.immutable.Seq<Expression> arguments) {
        if (arguments.size() != 3) {
            throw new IllegalArgumentException(
                    OUTPUT_HEADER + " takes (salt binary, row bigint, anchors), got " + arguments.size() + " arguments");
        }
        scala.collection.immutable.Seq<AbstractDataType> types = scala.jdk.javaapi.CollectionConverters.asScala(
                        java.util.List.<AbstractDataType>of(DataTypes.BinaryType, DataTypes.LongType, ANCHORS_TYPE))
                .toList();
        // propagateNull: null anchors give a null header, as rk_child_header's
        return new StaticInvoke(
                ReliableKafkaFunctions.class, DataTypes.BinaryType, "outputHeader", arguments, types,
                true, true, true, scala.Option.empty());
    }

    /**
     * {@link #childHeader} over the anchors as Catalyst holds them: the same bytes, without
     * converting the array to Scala Rows. Called by Spark's generated code ({@code rk_output_header}).
     */
    public static byte[] outputHeader(byte[] salt, long row, ArrayData anchors) {
        int n = anchors.numElements();
        if (n == 0 || salt == null || salt.length != 8) {
            return null;
        }
        if (n == 1) { // a row-to-row transform's output: no scan, no array
            if (anchors.isNullAt(0)) {
                return null;
            }
            InternalRow pair = anchors.getStruct(0, 2);
            if (pair.isNullAt(0) || pair.getLong(0) == 0L) {
                return null;
            }
            long root = pair.getLong(0);
            return onePairHeader(root, childEdge(XXH64.hashLong(row, saltHash(salt)), root));
        }
        long[] roots = new long[n]; // 0: a null pair or root, skipped as untracked
        for (int i = 0; i < n; i++) {
            if (!anchors.isNullAt(i)) {
                InternalRow pair = anchors.getStruct(i, 2);
                if (!pair.isNullAt(0)) {
                    roots[i] = pair.getLong(0);
                }
            }
        }
        return childrenHeader(XXH64.hashLong(row, saltHash(salt)), roots, distinctRoots(roots, n));
    }

    /** The v2 header of one (root, edge) pair; null for a missing or zero root. */
    public static byte[] anchorsHeader(Long root, Long edge) {
        if (root == null || root == 0L || edge == null) {
            return null;
        }
        return onePairHeader(root, edge);
    }

    private static byte[] onePairHeader(long root, long edge) {
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
        long[] roots = new long[n]; // 0: a null pair or root, skipped as untracked
        scala.collection.Iterator<Row> pairs = anchors.iterator();
        for (int i = 0; pairs.hasNext(); i++) {
            Row pair = pairs.next();
            if (pair != null && !pair.isNullAt(0)) {
                roots[i] = pair.getLong(0);
            }
        }
        return childrenHeader(saltRowHash(salt, row), roots, distinctRoots(roots, n));
    }

    /**
     * Compacts the first {@code n} of {@code roots} (a row's roots in order, 0 for none) to its
     * distinct non-zero roots in order of first appearance, in place; returns how many there are.
     * One scan for both ways a row's anchors arrive ({@link #outputHeader}, {@link #childHeader}).
     */
    static int distinctRoots(long[] roots, int n) {
        int distinct = 0;
        RootXors seen = n > 16 ? new RootXors() : null; // many roots (an aggregate's output): no scan
        for (int i = 0; i < n; i++) {
            long root = roots[i]; // read before its slot can be written: distinct <= i
            if (root == 0L || (seen == null ? contains(roots, distinct, root) : !seen.add(root))) {
                continue;
            }
            roots[distinct++] = root;
        }
        return distinct;
    }

    /**
     * The v2 header of the first {@code distinct} of {@code roots}, each with its child edge from
     * {@code seed} (the row's {@link #saltRowHash}); null for none.
     */
    private static byte[] childrenHeader(long seed, long[] roots, int distinct) {
        if (distinct == 0) {
            return null;
        }
        byte[] out = new byte[prefixLength(16 * distinct) + 16 * distinct]; // written in place: no body copied
        int at = putPrefix(out, 16 * distinct);
        for (int i = 0; i < distinct; i++, at += 16) {
            putLong(out, at, roots[i]);
            putLong(out, at + 8, childEdge(seed, roots[i]));
        }
        return out;
    }

    /**
     * Spark's {@code xxhash64} chain over (salt, row): a row's child edges continue from it. Not
     * cached ({@link #saltHash}): a UDF gets a new salt array per row.
     */
    static long saltRowHash(byte[] salt, long row) {
        return XXH64.hashLong(row, XXH64.hashLong(littleEndianLong(salt), SPARK_SEED));
    }

    /** A salt's bytes and their hash, the first link of every row's chain (one salt a batch). */
    private static final class SaltHash {
        final byte[] salt;
        final long hash;

        SaltHash(byte[] salt, long hash) {
            this.salt = salt;
            this.hash = hash;
        }
    }

    // the last salt hashed: Spark's generated code passes a batch's salt literal as the same array
    // to every row, so its hash is computed once per batch and task thread, not once per row
    private static volatile SaltHash lastSalt = new SaltHash(new byte[0], 0L);

    /** {@code xxhash64(salt)} (Spark's seed): the salt's 8 little-endian bytes hashed as the long. */
    static long saltHash(byte[] salt) {
        SaltHash last = lastSalt;
        if (last.salt == salt) {
            return last.hash;
        }
        long hash = XXH64.hashLong(littleEndianLong(salt), SPARK_SEED);
        lastSalt = new SaltHash(salt, hash);
        return hash;
    }

    /** {@code xxhash64(salt, row, root, CHILD_TAG)}, 0 replaced, from the hash of (salt, row). */
    static long childEdge(long saltRowHash, long root) {
        long edge = XXH64.hashInt(CHILD_TAG, XXH64.hashLong(root, saltRowHash));
        return edge != 0L ? edge : ZERO_REPLACEMENT;
    }

    /** The bytes of a header's prefix (0x02 and the varint) for a body of {@code length} bytes. */
    static int prefixLength(int length) {
        long zigzag = 2L * length;
        int at = 2;
        while ((zigzag & ~0x7FL) != 0) {
            at++;
            zigzag >>>= 7;
        }
        return at;
    }

    /** Writes a header's prefix for a body of {@code length} bytes at the start of {@code out}; returns its length. */
    static int putPrefix(byte[] out, int length) {
        long zigzag = 2L * length;
        int at = 0;
        out[at++] = 2;
        while ((zigzag & ~0x7FL) != 0) {
            out[at++] = (byte) ((zigzag & 0x7F) | 0x80);
            zigzag >>>= 7;
        }
        out[at++] = (byte) zigzag;
        return at;
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

    /** Writes {@code value} big-endian at {@code at} of {@code out}, in one (unaligned) write. */
    static void putLong(byte[] out, int at, long value) {
        java.util.Objects.checkFromIndexSize(at, 8, out.length);
        Platform.putLong(out, Platform.BYTE_ARRAY_OFFSET + at, LITTLE_ENDIAN ? Long.reverseBytes(value) : value);
    }

    /** The big-endian int64 at {@code at} of {@code in}. */
    static long getLong(byte[] in, int at) {
        java.util.Objects.checkFromIndexSize(at, 8, in.length);
        return ChildXor.bigEndianLong(in, Platform.BYTE_ARRAY_OFFSET + at);
    }

    static final boolean LITTLE_ENDIAN = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN;
}
