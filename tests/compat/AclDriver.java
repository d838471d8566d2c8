// Apache RocketMQ's own clients signing with AclClientRPCHook(new SessionCredentials(ak, sk)) against
// a cluster of ours with ACL on (tests/compat/test_acl_clients.py), and unsigned in the clients' TLS mode
// (tests/compat/test_tls_java.py; 5.4.0 and 4.9.8 jars). Compiled and run like
// TransactionDriver.java (bench/compare/java.py: ensure_driver, driver_argv(..., main="AclDriver")).
//
//   java -cp <rocketmq jars>:<classes> AclDriver produce namesrv=h:p topic=T group=G ak=A sk=S count=3
//   java -cp <rocketmq jars>:<classes> AclDriver consume namesrv=h:p topic=T group=G ak=A sk=S expect=3 timeout=8
//
// ak/sk empty: no hook (unsigned). Prints one line "RESULT {json}":
//   produce: {"sent": n, "error": "<the first failure and its causes, or empty>"}
//   consume: {"received": n} after `expect` messages arrived or `timeout` seconds passed.
//   (The tests give 75 s: a push consumer whose rebalance heartbeat lost the client's heartbeat lock is
//   refused with SUBSCRIPTION_NOT_LATEST until its next heartbeat, up to 30 s; apache/rocketmq#2738.)

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.RPCHook;

public final class AclDriver {
    public static void main(String[] args) throws Exception {
        Map<String, String> o = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) o.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        int rc = 1;
        try {
            rc = "produce".equals(args[0]) ? produce(o) : consume(o);
        } catch (Throwable t) {
            t.printStackTrace();
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    static RPCHook hook(Map<String, String> o) {
        String ak = o.getOrDefault("ak", "");
        String sk = o.getOrDefault("sk", "");
        return ak.isEmpty() ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static int produce(Map<String, String> o) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(o.get("group"), hook(o));
        producer.setNamesrvAddr(o.get("namesrv"));
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(5000);
        producer.start();
        int count = Integer.parseInt(o.getOrDefault("count", "1"));
        int sent = 0;
        String error = "";
        for (int i = 0; i < count; i++) {
            try {
                producer.send(new Message(o.get("topic"), "TagA", ("acl-" + i).getBytes("UTF-8")));
                sent++;
            } catch (Exception e) {
                if (error.isEmpty()) {
                    StringBuilder sb = new StringBuilder(e.toString());
                    for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                        sb.append(" <- ").append(c);
                    }
                    error = sb.toString();
                }
            }
        }
        producer.shutdown();
        System.out.println("RESULT {\"sent\": " + sent + ", \"error\": " + quote(error) + "}");
        return 0;
    }

    static int consume(Map<String, String> o) throws Exception {
        RPCHook hook = hook(o);
        DefaultMQPushConsumer consumer = hook == null
            ? new DefaultMQPushConsumer(o.get("group"))
            : new DefaultMQPushConsumer(o.get("group"), hook, new AllocateMessageQueueAveragely()); // 4.9.8 too
        consumer.setNamesrvAddr(o.get("namesrv"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(o.get("topic"), "*");
        AtomicInteger received = new AtomicInteger();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            received.addAndGet(msgs.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        int expect = Integer.parseInt(o.getOrDefault("expect", "1"));
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(o.getOrDefault("timeout", "10"));
        while (received.get() < expect && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        consumer.shutdown();
        System.out.println("RESULT {\"received\": " + received.get() + "}");
        return 0;
    }
}
