package reliablekafka.spark;

import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.expressions.Aggregator;

/**
 * The XOR of each root's edges over {@code rk-anchors} v2 headers (see ReliableKafkaFunctions):
 * the driver gets one pair per root instead of one per output row. A header that is not v2 fails
 * the task (the writer only feeds it headers it built).
 */
public final class ChildXor extends Aggregator<byte[], RootXors, byte[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public RootXors zero() {
        return new RootXors();
    }

    @Override
    public RootXors reduce(RootXors buffer, byte[] header) {
        if (header == null) {
            return buffer;
        }
        if (header.length < 2 || header[0] != 2) {
            throw new IllegalArgumentException("rk_child_xor: not an rk-anchors v2 header (" + header.length + " bytes)");
        }
        long zigzag = 0;
        int at = 1;
        for (int shift = 0; ; shift += 7) {
            if (at >= header.length || shift > 63) {
                throw new IllegalArgumentException("rk_child_xor: truncated length in an rk-anchors v2 header");
            }
            byte b = header[at++];
            zigzag |= (long) (b & 0x7F) << shift;
            if ((b & 0x80) == 0) {
                break;
            }
        }
        long length = (zigzag >>> 1) ^ -(zigzag & 1);
        if (length < 0 || length % 16 != 0 || at + length != header.length) {
            throw new IllegalArgumentException(
                    "rk_child_xor: an rk-anchors v2 header of " + header.length + " bytes declares " + length + " bytes of pairs");
        }
        for (; at < header.length; at += 16) {
            buffer.xor(ReliableKafkaFunctions.getLong(header, at), ReliableKafkaFunctions.getLong(header, at + 8));
        }
        return buffer;
    }

    @Override
    public RootXors merge(RootXors into, RootXors other) {
        into.xorAll(other);
        return into;
    }

    @Override
    public byte[] finish(RootXors buffer) {
        return buffer.toBytes();
    }

    @Override
    public Encoder<RootXors> bufferEncoder() {
        return Encoders.javaSerialization(RootXors.class);
    }

    @Override
    public Encoder<byte[]> outputEncoder() {
        return Encoders.BINARY();
    }
}
