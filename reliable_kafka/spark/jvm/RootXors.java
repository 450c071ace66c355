package reliablekafka.spark;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;

/**
 * root -> XOR of its values: an open-addressing table of primitive longs (linear probing, at most
 * half full). Key 0 marks a free slot, so a root 0 (never a valid id, but not ours to refuse here)
 * is kept beside the table. Serialized as its used entries only. The last root's slot is kept: an
 * output's roots come in runs (the rows one input's transform made), so most updates skip the probe.
 */
public final class RootXors implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final int INITIAL_CAPACITY = 64;

    private transient long[] keys = new long[INITIAL_CAPACITY];
    private transient long[] vals = new long[INITIAL_CAPACITY];
    private transient int size;
    private transient boolean hasZero;
    private transient long zeroVal;
    private transient long lastKey; // 0: none (root 0 never takes a slot)
    private transient int lastSlot;

    public int size() {
        return size + (hasZero ? 1 : 0);
    }

    /** Adds {@code root} with val 0 if absent; true when it was absent. */
    public boolean add(long root) {
        int before = size();
        xor(root, 0L);
        return size() > before;
    }

    public void xor(long root, long val) {
        if (root == 0L) {
            hasZero = true;
            zeroVal ^= val;
            return;
        }
        if (root == lastKey) {
            vals[lastSlot] ^= val;
            return;
        }
        int mask = keys.length - 1;
        int i = slot(root, mask);
        while (true) {
            long key = keys[i];
            if (key == root) {
                vals[i] ^= val;
                lastKey = root;
                lastSlot = i;
                return;
            }
            if (key == 0L) {
                keys[i] = root;
                vals[i] = val;
                lastKey = root;
                lastSlot = i;
                if (++size * 2 > keys.length) {
                    grow();
                }
                return;
            }
            i = (i + 1) & mask;
        }
    }

    public void xorAll(RootXors other) {
        long[] k = other.keys;
        long[] v = other.vals;
        for (int i = 0; i < k.length; i++) {
            if (k[i] != 0L) {
                xor(k[i], v[i]);
            }
        }
        if (other.hasZero) {
            xor(0L, other.zeroVal);
        }
    }

    /** The entries as (root, XOR) pairs of big-endian int64s. */
    public byte[] toBytes() {
        byte[] out = new byte[16 * size()];
        int at = 0;
        for (int i = 0; i < keys.length; i++) {
            if (keys[i] != 0L) {
                ReliableKafkaFunctions.putLong(out, at, keys[i]);
                ReliableKafkaFunctions.putLong(out, at + 8, vals[i]);
                at += 16;
            }
        }
        if (hasZero) {
            ReliableKafkaFunctions.putLong(out, at, 0L);
            ReliableKafkaFunctions.putLong(out, at + 8, zeroVal);
        }
        return out;
    }

    private static int slot(long key, int mask) {
        long h = key * 0x9E3779B97F4A7C15L; // Fibonacci hashing: the high bits mix every key bit
        return (int) (h ^ (h >>> 32)) & mask;
    }

    private void grow() {
        long[] oldKeys = keys;
        long[] oldVals = vals;
        keys = new long[oldKeys.length * 2];
        vals = new long[oldKeys.length * 2];
        size = 0;
        lastKey = 0L;
        for (int i = 0; i < oldKeys.length; i++) {
            if (oldKeys[i] != 0L) {
                xor(oldKeys[i], oldVals[i]);
            }
        }
    }

    private void writeObject(ObjectOutputStream out) throws IOException {
        out.writeInt(size());
        for (int i = 0; i < keys.length; i++) {
            if (keys[i] != 0L) {
                out.writeLong(keys[i]);
                out.writeLong(vals[i]);
            }
        }
        if (hasZero) {
            out.writeLong(0L);
            out.writeLong(zeroVal);
        }
    }

    private void readObject(ObjectInputStream in) throws IOException {
        int n = in.readInt();
        int capacity = INITIAL_CAPACITY;
        while (capacity < 2 * n + 2) {
            capacity *= 2;
        }
        keys = new long[capacity];
        vals = new long[capacity];
        for (int i = 0; i < n; i++) {
            xor(in.readLong(), in.readLong());
        }
    }
}
