// Apache RocketMQ's own DefaultMQProducer (5.x remoting API) sending timer messages to any RocketMQ
// cluster (ours in tests/compat/test_java_timer.py). Compiled and run like bench/compare/Driver.java
// (bench/compare/java.py: ensure_driver(lib, source=...), driver_argv(..., main="TimerDriver")).
//
//   java -cp <rocketmq jars>:<classes> TimerDriver run namesrv=h:p topic=T timeout=30 settle=2
//
// Messages told apart by their key:
//   deliver   Message.setDeliverTimeMs(now + 2500)
//   delaysec  Message.setDelayTimeSec(2)
//   delayms   Message.setDelayTimeMs(1500)
//   past      Message.setDeliverTimeMs(now - 10000): due already
//   far       Message.setDelayTimeSec(4 days): beyond the broker's timerMaxDelaySec, must be refused
// A DefaultMQPushConsumer of a new group records when each key arrives (ms, this JVM's clock) and its
// properties. Prints one line "RESULT {json}": per key the earliest allowed arrival ("earliest":
// the absolute time, or the send's start + the delay), the send's end ("sentEnd"), its status or
// error code and message, the arrivals, and the delivered properties.

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class TimerDriver {
    static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);
    static final Map<String, List<Long>> ARRIVED = new ConcurrentHashMap<>();
    static final Map<String, Map<String, String>> PROPS = new ConcurrentHashMap<>();

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
        if (v instanceof List) {
            StringBuilder sb = new StringBuilder("[");
            for (Object x : (List<?>) v) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(x));
            }
            return sb.append(']').toString();
        }
        return json(v.toString());
    }

    static int run(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = o.get("topic");
        double timeout = Double.parseDouble(o.getOrDefault("timeout", "30"));
        double settle = Double.parseDouble(o.getOrDefault("settle", "2"));
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("CID_TIMER_" + RUN);
        c.setNamesrvAddr(ns);
        c.setInstanceName("consumer-" + RUN);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                ARRIVED.computeIfAbsent(m.getKeys(), k -> new ArrayList<>()).add(now);
                Map<String, String> p = new LinkedHashMap<>(m.getProperties());
                p.put("@msgId", m.getMsgId());
                p.put("@topic", m.getTopic());
                PROPS.put(m.getKeys(), p);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = new DefaultMQProducer("PID_TIMER_" + RUN);
        p.setNamesrvAddr(ns);
        p.setInstanceName("producer-" + RUN);
        p.setSendMsgTimeout(5000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        Thread.sleep(1000);  // the consumer's rebalance
        Map<String, Object> sends = new LinkedHashMap<>();
        for (String key : new String[] {"deliver", "delaysec", "delayms", "past", "far"}) {
            Message m = new Message(topic, "TagTimer", key, ("body of " + key).getBytes("UTF-8"));
            long start = System.currentTimeMillis();
            long earliest;
            switch (key) {
                case "deliver": earliest = start + 2500; m.setDeliverTimeMs(earliest); break;
                case "delaysec": earliest = start + 2000; m.setDelayTimeSec(2); break;
                case "delayms": earliest = start + 1500; m.setDelayTimeMs(1500); break;
                case "past": earliest = start - 10000; m.setDeliverTimeMs(earliest); break;
                default: earliest = start + 4L * 86400 * 1000; m.setDelayTimeSec(4L * 86400); break;
            }
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("earliest", earliest);
            try {
                SendResult res = p.send(m);
                s.put("status", res.getSendStatus().name());
                s.put("msgId", res.getMsgId());
            } catch (MQBrokerException e) {
                s.put("status", "ERROR");
                s.put("code", e.getResponseCode());
                s.put("error", e.getErrorMessage());
            }
            s.put("sentEnd", System.currentTimeMillis());
            sends.put(key, s);
        }
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        List<String> expected = List.of("deliver", "delaysec", "delayms", "past");
        while (System.nanoTime() < deadline && !expected.stream().allMatch(ARRIVED::containsKey)) {
            Thread.sleep(20);
        }
        Thread.sleep((long) (settle * 1000));
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("sends", sends);
        r.put("arrived", new LinkedHashMap<>(ARRIVED));
        r.put("props", new LinkedHashMap<>(PROPS));
        System.out.println("RESULT " + json(r));
        p.shutdown();
        c.shutdown();
        return 0;
    }
}
