// Apache RocketMQ's own DefaultMQPushConsumer (5.x remoting API) shut down right after it has
// consumed everything, against any RocketMQ cluster (ours in tests/compat/test_java_push_shutdown.py).
// Compiled and run like bench/compare/Driver.java (bench/compare/java.py: ensure_driver(lib, source=...),
// driver_argv(..., main="PushShutdownDriver")).
//
//   java -cp <rocketmq jars>:<classes> PushShutdownDriver run namesrv=h:p topic=T group=G rounds=4 count=40 timeout=30
//
// Each round sends `count` messages (bodies "<round>-<i>") with a DefaultMQProducer, starts a new
// DefaultMQPushConsumer of `group` (CONSUME_FROM_FIRST_OFFSET; persistConsumerOffsetInterval 60 s, so
// that only the pulls' commitOffset and shutdown's persistAll carry offsets to the broker;
// awaitTerminationMillisWhenShutdown 5 s, so that shutdown waits for the listener calls in flight, as
// ConsumeMessageConcurrentlyService.shutdown(awaitTerminateMillis) does), waits until every message of
// the round was consumed, and calls shutdown() at once. Then DefaultMQAdminExt.examineConsumeStats(group)
// reads the broker's committed offsets. A consumer of the next round resumes from them: it must get
// that round's messages and none of an earlier one.
//
// Prints one line "RESULT {json}": per round the messages consumed ("consumed", distinct bodies of the
// round), bodies of earlier rounds delivered again ("again"), bodies not sent at all ("unknown"), and
// per queue the broker's max offset and the group's committed offset after the shutdown ("offsets":
// [{"brokerName", "queueId", "brokerOffset", "consumerOffset"}]), or "error" when something failed.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class PushShutdownDriver {
    static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new LinkedHashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq > 0) o.put(a.substring(0, eq), a.substring(eq + 1));
        }
        int rc = 1;
        try {
            rc = run(o);
        } catch (Throwable t) {
            t.printStackTrace();
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof String) {
            StringBuilder sb = new StringBuilder("\"");
            for (char c : ((String) v).toCharArray()) {
                if (c == '"' || c == '\\') sb.append('\\').append(c);
                else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                else sb.append(c);
            }
            return sb.append('"').toString();
        }
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(e.getKey().toString())).append(':').append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (v instanceof Iterable) {
            StringBuilder sb = new StringBuilder("[");
            for (Object x : (Iterable<?>) v) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(x));
            }
            return sb.append(']').toString();
        }
        return json(v.toString());
    }

    /** A sync send, tried up to 3 times (the sends only set the stage; a loaded machine may time one out). */
    static void send(DefaultMQProducer producer, Message m) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                SendResult sr = producer.send(m);
                if (sr.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("send: " + sr);
                return;
            } catch (Exception e) {
                if (attempt == 3) throw e;
                System.err.println("send attempt " + attempt + " failed: " + e);
            }
        }
    }

    static int run(Map<String, String> o) throws Exception {
        String namesrv = o.get("namesrv");
        String topic = o.get("topic");
        String group = o.get("group");
        int rounds = Integer.parseInt(o.getOrDefault("rounds", "4"));
        int count = Integer.parseInt(o.getOrDefault("count", "40"));
        long timeoutMs = Long.parseLong(o.getOrDefault("timeout", "30")) * 1000L;

        DefaultMQProducer producer = new DefaultMQProducer("PID_SHUTDOWN_" + RUN);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("producer-" + RUN);
        producer.setSendMsgTimeout(10_000);  // a loaded 2-core test machine
        producer.start();
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("admin-" + RUN);
        admin.start();

        List<Object> out = new ArrayList<>();
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("rounds", out);
        try {
            for (int r = 0; r < rounds; r++) {
                Map<String, Object> round = new LinkedHashMap<>();
                out.add(round);
                for (int i = 0; i < count; i++) send(producer, new Message(topic, (r + "-" + i).getBytes(StandardCharsets.UTF_8)));
                final int current = r;
                Set<String> consumed = ConcurrentHashMap.newKeySet();
                Set<String> again = ConcurrentHashMap.newKeySet();
                Set<String> unknown = ConcurrentHashMap.newKeySet();
                DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
                consumer.setNamesrvAddr(namesrv);
                consumer.setInstanceName("consumer-" + RUN + "-" + r);
                consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                consumer.setPersistConsumerOffsetInterval(60_000);
                consumer.setAwaitTerminationMillisWhenShutdown(5_000);
                consumer.subscribe(topic, "*");
                consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        String body = new String(m.getBody(), StandardCharsets.UTF_8);
                        int dash = body.indexOf('-');
                        int of = dash > 0 ? Integer.parseInt(body.substring(0, dash)) : -1;
                        if (of == current) consumed.add(body);
                        else if (of >= 0 && of < current) again.add(body);
                        else unknown.add(body);
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                consumer.start();
                long deadline = System.currentTimeMillis() + timeoutMs;
                while (consumed.size() < count && System.currentTimeMillis() < deadline) Thread.sleep(5);
                consumer.shutdown();
                round.put("consumed", consumed.size());
                round.put("again", new ArrayList<>(again));
                round.put("unknown", new ArrayList<>(unknown));
                ConsumeStats stats = admin.examineConsumeStats(group);
                List<Object> offsets = new ArrayList<>();
                for (Map.Entry<MessageQueue, OffsetWrapper> e : new TreeMap<>(stats.getOffsetTable()).entrySet()) {
                    if (!topic.equals(e.getKey().getTopic())) continue;
                    Map<String, Object> q = new LinkedHashMap<>();
                    q.put("brokerName", e.getKey().getBrokerName());
                    q.put("queueId", e.getKey().getQueueId());
                    q.put("brokerOffset", e.getValue().getBrokerOffset());
                    q.put("consumerOffset", e.getValue().getConsumerOffset());
                    offsets.add(q);
                }
                round.put("offsets", offsets);
            }
        } catch (Exception e) {
            e.printStackTrace();
            result.put("error", e.toString());
        } finally {
            producer.shutdown();
            admin.shutdown();
        }
        System.out.println("RESULT " + json(result));
        return result.containsKey("error") ? 1 : 0;
    }
}
