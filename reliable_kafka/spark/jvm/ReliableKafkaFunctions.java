package reliablekafka.spark;

import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * reliable-kafka's per-row work on Spark's side of the output path (reliable_kafka.spark.writer,
 * DESIGN 7.2), where Spark SQL has no cheap built-in: a long as 8 big-endian bytes (ANSI mode
 * refuses CAST(bigint AS binary)) and a per-key XOR that an observation can carry to the driver.
 *
 * <ul>
 *   <li>{@code rk_anchors_v2(root bigint, edge bigint) -> binary}: the one-pair {@code rk-anchors}
 *       v2 header, 0x02 0x20 root edge (18 bytes); null when root is null or 0 (untracked).
 *   <li>{@code rk_child_xor(header binary) -> binary}: aggregate over v2 headers of any number of
 *       pairs: one (root, XOR of its edges) pair per distinct root, big-endian int64s; nulls are
 *       skipped, no rows give zero bytes.
 * </ul>
 */
public final class ReliableKafkaFunctions {
    public static final String ANCHORS_V2 = "rk_anchors_v2";
    public static final String CHILD_XOR = "rk_child_xor";

    private static final Map<SparkSession, Boolean> REGISTERED =
            Collections.synchronizedMap(new WeakHashMap<>());

    private ReliableKafkaFunctions() {}

    /** Registers the functions as temporary functions of {@code spark}, once per session. */
    public static boolean register(SparkSession spark) {
        if (REGISTERED.containsKey(spark)) {
            return false;
        }
        UDF2<Long, Long, byte[]> header = ReliableKafkaFunctions::anchorsHeader;
        spark.udf().register(ANCHORS_V2, header, DataTypes.BinaryType);
        spark.udf().register(CHILD_XOR, functions.udaf(new ChildXor(), Encoders.BINARY()));
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
