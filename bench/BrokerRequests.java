import com.sun.tools.attach.VirtualMachine;
import javax.management.*;
import javax.management.remote.*;
import java.util.*;
/**
 * Kafka's own request metrics of a local broker JVM, for bench/broker_requests.py: per request type
 * its count (RequestsPerSec, per version) and the sums (mean x count) of its time histograms. Attaches
 * to the JVM by pid and starts its local JMX agent. Run as a single-file source program:
 * {@code java -Djdk.attach.allowAttachSelf=true bench/BrokerRequests.java PID}; nothing is built.
 */
public class BrokerRequests {
  public static void main(String[] a) throws Exception {
    VirtualMachine vm = VirtualMachine.attach(a[0]);
    String addr = vm.startLocalManagementAgent();
    JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(addr));
    MBeanServerConnection s = c.getMBeanServerConnection();
    TreeMap<String,String> out = new TreeMap<>();
    for (ObjectName n : s.queryNames(new ObjectName("kafka.network:type=RequestMetrics,*"), null)) {
      String name = n.getKeyProperty("name"), req = n.getKeyProperty("request");
      if (name.equals("RequestsPerSec")) {
        out.put(req + " count" + (n.getKeyProperty("version") != null ? " v" + n.getKeyProperty("version") : ""), String.valueOf(s.getAttribute(n, "Count")));
      } else if (name.endsWith("TimeMs")) {
        long cnt = (Long) s.getAttribute(n, "Count"); double mean = (Double) s.getAttribute(n, "Mean");
        out.put(req + " " + name + "Sum", String.format("%.1f", cnt * mean));
      }
    }
    for (Map.Entry<String,String> e : out.entrySet()) System.out.println(e.getKey() + "\t" + e.getValue());
    c.close(); vm.detach();
  }
}
