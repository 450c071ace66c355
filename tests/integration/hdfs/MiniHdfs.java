// A one-datanode HDFS (Hadoop's MiniDFSCluster) on 127.0.0.1, for the Spark checkpoint tests.
//
//   java -cp '<hadoop-client-minicluster jars>/*' MiniHdfs.java BASE_DIR
//
// Java runs this source file directly (no javac step). It prints one line
// "READY hdfs://127.0.0.1:<rpc port> <http port>" once the file system takes writes, then serves
// until its stdin reaches end of file (the test closes it, or dies), and shuts the cluster down.

import java.io.InputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
        // Loopback only: the name node and the data node listen on 127.0.0.1 (free ports).
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.setBoolean("dfs.permissions.enabled", false);  // the Spark driver writes as any user
        conf.setInt("dfs.replication", 1);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true).build();
        try {
            cluster.waitActive();
            int rpc = cluster.getNameNodePort();
            int http = cluster.getNameNode().getHttpAddress().getPort();
            System.out.println("READY hdfs://127.0.0.1:" + rpc + " " + http);
            System.out.flush();
            InputStream in = System.in;
            byte[] buffer = new byte[256];
            while (in.read(buffer) >= 0) {
                // serve until the parent closes our stdin (or dies)
            }
        } finally {
            cluster.shutdown();
        }
    }
}
