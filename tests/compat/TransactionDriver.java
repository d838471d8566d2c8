// Apache RocketMQ's own TransactionMQProducer against any RocketMQ cluster (ours in
// tests/compat/test_java_transactions.py). Compiled and run like bench/compare/Driver.java
// (bench/compare/java.py: ensure_driver(lib, source=...), driver_argv(..., main="TransactionDriver")).
//
//   java -cp <rocketmq jars>:<classes> TransactionDriver namesrv=h:p topic=T settle=4 timeout=40
//
// One run, one topic, five transactions told apart by their key:
//   commit            the local transaction commits
//   rollback          the local transaction rolls back
//   unknown-commit    the local transaction says UNKNOW; the check-back answers COMMIT_MESSAGE
//   unknown-rollback  the local transaction says UNKNOW; the check-back answers ROLLBACK_MESSAGE
//   orphan            sent by a producer that answers UNKNOW and then shuts down; another producer of
//                     the same group (started before, never sent anything) answers the check: COMMIT
//                     (CHECK_IMMUNITY_TIME_IN_SECONDS=5 keeps the broker from checking it before then)
// A DefaultMQPushConsumer of a new group reads the topic from its first offset until the committed
// messages arrived and then `settle` seconds more (rollbacks or duplicates would show up by then).
// Prints one line "RESULT {json}": send status and local state per key, checks per producer and key,
// deliveries per key, and the properties of each delivered message.

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class TransactionDriver {
    static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);
    static final Map<String, AtomicInteger> CHECKS = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> DELIVERED = new ConcurrentHashMap<>();
    static final Map<String, Map<String, String>> PROPS = new ConcurrentHashMap<>();
    static final java.util.concurrent.atomic.AtomicLong GONE_AT = new java.util.concurrent.atomic.AtomicLong();
    static final java.util.concurrent.atomic.AtomicBoolean ORPHAN_CHECKED_EARLY =
        new java.util.concurrent.atomic.AtomicBoolean();

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

    static void log(String msg) {
        System.err.println("[tx-driver] " + msg);
        System.err.flush();
    }

    /** Local transaction and check-back answers by message key; checks counted as "<who>:<key>". */
    static TransactionListener listener(String who, LocalTransactionState checkAnswer) {
        return new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch (msg.getKeys()) {
                    case "commit": return LocalTransactionState.COMMIT_MESSAGE;
                    case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String key = msg.getKeys();
                CHECKS.computeIfAbsent(who + ":" + key, k -> new AtomicInteger()).incrementAndGet();
                if ("orphan".equals(key) && GONE_AT.get() == 0) ORPHAN_CHECKED_EARLY.set(true);
                log(who + " checked " + key + " (" + msg.getTransactionId() + ", topic " + msg.getTopic() + ")");
                if (checkAnswer != null) return checkAnswer;
                return "unknown-rollback".equals(key) ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.COMMIT_MESSAGE;
            }
        };
    }

    static TransactionMQProducer producer(String ns, String group, String instance, TransactionListener l)
            throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(instance + "-" + RUN);
        p.setSendMsgTimeout(5000);
        p.setTransactionListener(l);
        p.start();
        return p;
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
        if (v instanceof AtomicInteger) return Integer.toString(((AtomicInteger) v).get());
        return json(v.toString());
    }

    static int run(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = o.get("topic");
        double settle = Double.parseDouble(o.getOrDefault("settle", "4"));
        double timeout = Double.parseDouble(o.getOrDefault("timeout", "40"));
        String group = "PID_TX_" + RUN;
        String orphanGroup = "PID_TX_ORPHAN_" + RUN;
        Map<String, Object> r = new LinkedHashMap<>();
        Map<String, Object> sends = new LinkedHashMap<>();
        r.put("sends", sends);

        // the other instance of the orphan's group: started first, sends nothing, answers COMMIT
        TransactionMQProducer other = producer(ns, orphanGroup, "other", listener("other", LocalTransactionState.COMMIT_MESSAGE));
        // it never sent: tell it about the topic's brokers so that its heartbeats reach them
        other.getDefaultMQProducerImpl().getMqClientFactory().updateTopicRouteInfoFromNameServer(topic);
        other.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();

        TransactionMQProducer main = producer(ns, group, "main", listener("main", null));
        for (String key : new String[] {"commit", "rollback", "unknown-commit", "unknown-rollback"}) {
            Message m = new Message(topic, "TagTx", key, ("body of " + key).getBytes("UTF-8"));
            m.putUserProperty("prop", key);
            TransactionSendResult res = main.sendMessageInTransaction(m, key);
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("status", res.getSendStatus().name());
            s.put("local", res.getLocalTransactionState().name());
            s.put("msgId", res.getMsgId());
            s.put("queueId", res.getMessageQueue().getQueueId());
            sends.put(key, s);
            log("sent " + key + ": " + s);
        }
        // the orphan: its producer answers UNKNOW, then goes away before any check
        TransactionMQProducer gone = producer(ns, orphanGroup, "gone", listener("gone", LocalTransactionState.ROLLBACK_MESSAGE));
        Message orphanMsg = new Message(topic, "TagTx", "orphan", "body of orphan".getBytes("UTF-8"));
        // not checked before 5 s (instead of transactionTimeOut): its producer is gone by then
        orphanMsg.putUserProperty("CHECK_IMMUNITY_TIME_IN_SECONDS", "5");
        TransactionSendResult orphan = gone.sendMessageInTransaction(orphanMsg, "orphan");
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("status", orphan.getSendStatus().name());
        s.put("local", orphan.getLocalTransactionState().name());
        s.put("msgId", orphan.getMsgId());
        sends.put("orphan", s);
        gone.shutdown();
        GONE_AT.set(System.currentTimeMillis());
        log("sent orphan and shut its producer down");

        DefaultMQPushConsumer c = new DefaultMQPushConsumer("CID_TX_" + RUN);
        c.setNamesrvAddr(ns);
        c.setInstanceName("consumer-" + RUN);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String key = m.getKeys();
                DELIVERED.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
                Map<String, String> p = new LinkedHashMap<>(m.getProperties());
                p.put("@body", new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
                p.put("@msgId", m.getMsgId());
                p.put("@sysFlag", Integer.toString(m.getSysFlag()));
                p.put("@queueId", Integer.toString(m.getQueueId()));
                PROPS.put(key, p);
                log("delivered " + key + " " + m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();

        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        List<String> expected = List.of("commit", "unknown-commit", "orphan");
        while (System.nanoTime() < deadline && !expected.stream().allMatch(DELIVERED::containsKey)) {
            Thread.sleep(100);
        }
        r.put("all_committed_arrived", expected.stream().allMatch(DELIVERED::containsKey));
        Thread.sleep((long) (settle * 1000));
        r.put("checks", new LinkedHashMap<>(CHECKS));
        r.put("orphan_checked_before_sender_gone", ORPHAN_CHECKED_EARLY.get());
        r.put("delivered", new LinkedHashMap<>(DELIVERED));
        r.put("props", new LinkedHashMap<>(PROPS));
        r.put("group", group);
        r.put("orphanGroup", orphanGroup);
        System.out.println("RESULT " + json(r));
        System.out.flush();
        c.shutdown();
        main.shutdown();
        other.shutdown();
        return 0;
    }
}
