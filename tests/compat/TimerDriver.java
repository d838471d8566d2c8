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
//
//   java ... TimerDriver bench namesrv=h:p topic=T n=20000 window=60 threads=16 throughput=10000
// (bench/compare/timer.py) sends n timer messages with setDeliverTimeMs spread evenly over `window`
// seconds that start once all are sent (both topics, T and T + "Plain", created first with `queues`
// queues, default 8, so that the consumer has the route from its start), and times their arrival
// at a push consumer: delivery error
// (arrival - scheduled, ms) p50/p99/max and how many came early; then sends `throughput` plain
// messages and as many timer messages (setDeliverTimeMs, due in an hour; in halves, plain, timer,
// timer, plain, so that a broker still warming up favours neither) from `tputThreads` threads
// (default `threads`) of sync sends with `size`-byte bodies (default 128): msgs/s of each and their
// failed sends (plain_errors, timer_errors). Prints one line "RESULT {json}".
//
// Both commands first send one plain probe message (tag TagProbe, key probe-<queue>) to each queue and wait until
// the push consumer has them all (awaitConsuming), so that timing starts once it really pulls.
//
// The "run" command: a DefaultMQPushConsumer of a new group records when each key arrives (ms, this JVM's clock) and its
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
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class TimerDriver {
    static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);
    static final Map<String, List<Long>> ARRIVED = new ConcurrentHashMap<>();
    static final Map<String, Map<String, String>> PROPS = new ConcurrentHashMap<>();
    /** Arrival (ms) of each probe of awaitConsuming in the bench, by key. */
    static final Map<String, Long> PROBED = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new LinkedHashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq > 0) o.put(a.substring(0, eq), a.substring(eq + 1));
        }
        int rc = 1;
        try {
            rc = args.length > 0 && "bench".equals(args[0]) ? bench(o) : run(o);
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

    static double pct(long[] sorted, double p) {
        if (sorted.length == 0) return Double.NaN;
        int i = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    /** Failed sends of sendMany (exceptions and a status other than SEND_OK), by phase. */
    static final java.util.concurrent.atomic.AtomicInteger PLAIN_ERRORS = new java.util.concurrent.atomic.AtomicInteger();
    static final java.util.concurrent.atomic.AtomicInteger TIMER_ERRORS = new java.util.concurrent.atomic.AtomicInteger();

    static double sendMany(DefaultMQProducer p, String topic, int n, int threads, long deliverAt, int size,
                           java.util.concurrent.atomic.AtomicInteger failed) throws Exception {
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
        java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
        byte[] body = new byte[size];
        long t0 = System.nanoTime();
        List<java.util.concurrent.Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            fs.add(pool.submit(() -> {
                while (next.getAndIncrement() < n) {
                    Message m = new Message(topic, body);
                    if (deliverAt > 0) m.setDeliverTimeMs(deliverAt);
                    try {
                        if (p.send(m).getSendStatus() != SendStatus.SEND_OK) failed.incrementAndGet();
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                }
                return null;
            }));
        }
        for (java.util.concurrent.Future<?> f : fs) f.get();
        pool.shutdown();
        return n / ((System.nanoTime() - t0) / 1e9);
    }

    /**
     * Create {@code names} with {@code queues} queues on every master (UPDATE_AND_CREATE_TOPIC through
     * DefaultMQAdminExt) and wait until the NameServer routes them all: a push consumer started before a
     * topic exists only learns its route at its next route poll (30 s), which would show as late timers.
     */
    static void createTopics(String ns, List<String> names, int queues, long timeoutMs) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("bench-admin-" + RUN);
        admin.start();
        try {
            long deadline = System.currentTimeMillis() + timeoutMs;
            List<String> masters = new ArrayList<>();
            while (masters.isEmpty()) {
                try {
                    for (var bd : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
                        String addr = bd.getBrokerAddrs().get(0L);
                        if (addr != null) masters.add(addr);
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) throw e;
                }
                if (masters.isEmpty()) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no master registered");
                    Thread.sleep(200);
                }
            }
            for (String name : names) {
                for (String addr : masters) admin.createAndUpdateTopicConfig(addr, new TopicConfig(name, queues, queues, 6));
            }
            for (String name : names) {
                while (true) {
                    int seen = 0;
                    try {
                        for (var qd : admin.examineTopicRouteInfo(name).getQueueDatas()) seen += qd.getWriteQueueNums();
                    } catch (Exception e) {
                        // not routed yet
                    }
                    if (seen >= queues * masters.size()) break;
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException(name + " not routed in time");
                    Thread.sleep(200);
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    /**
     * Send one plain message with key {@code "probe-<i>"} to each of {@code topic}'s queues and wait until
     * {@code arrived} has seen every probe (or throw after {@code timeoutMs}): proof that the push consumer
     * pulls from every queue, which a fixed sleep is not. The 5.x client's rebalance raises the
     * subscription's version and sends it in a heartbeat only if no other heartbeat holds the lock
     * (MQClientInstance.sendHeartbeatToAllBrokerWithLockV2); when one does, every pull is refused with
     * SUBSCRIPTION_NOT_LATEST (25) until the next heartbeat, up to heartbeatBrokerInterval (30 s) later.
     */
    static void awaitConsuming(DefaultMQProducer p, String topic, java.util.function.Predicate<String> arrived,
                               long timeoutMs) throws Exception {
        List<org.apache.rocketmq.common.message.MessageQueue> queues = p.fetchPublishMessageQueues(topic);
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < queues.size(); i++) {
            String key = "probe-" + i;
            p.send(new Message(topic, "TagProbe", key, key.getBytes("UTF-8")), queues.get(i));
            keys.add(key);
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!keys.stream().allMatch(arrived)) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the push consumer did not receive " + keys + " within " + timeoutMs + " ms");
            }
            Thread.sleep(20);
        }
    }

    static int bench(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = o.get("topic");
        int n = Integer.parseInt(o.getOrDefault("n", "20000"));
        double window = Double.parseDouble(o.getOrDefault("window", "60"));
        int threads = Integer.parseInt(o.getOrDefault("threads", "16"));
        int tput = Integer.parseInt(o.getOrDefault("throughput", "10000"));
        int tputThreads = Integer.parseInt(o.getOrDefault("tputThreads", Integer.toString(threads)));
        int size = Integer.parseInt(o.getOrDefault("size", "128"));
        int queues = Integer.parseInt(o.getOrDefault("queues", "8"));
        createTopics(ns, List.of(topic, topic + "Plain"), queues, 60_000L);
        long[] errors = new long[n];
        java.util.concurrent.atomic.AtomicInteger got = new java.util.concurrent.atomic.AtomicInteger();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("CID_TIMER_BENCH_" + RUN);
        c.setNamesrvAddr(ns);
        c.setInstanceName("bench-consumer-" + RUN);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.setConsumeThreadMin(4);
        c.setConsumeThreadMax(4);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                if ("TagProbe".equals(m.getTags())) {
                    PROBED.put(m.getKeys(), now);
                    continue;
                }
                long at = Long.parseLong(new String(m.getBody(), java.nio.charset.StandardCharsets.US_ASCII).trim());
                int i = got.getAndIncrement();
                if (i < errors.length) errors[i] = now - at;
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = new DefaultMQProducer("PID_TIMER_BENCH_" + RUN);
        p.setNamesrvAddr(ns);
        p.setInstanceName("bench-producer-" + RUN);
        p.setSendMsgTimeout(10000);
        p.start();
        awaitConsuming(p, topic, PROBED::containsKey, 90_000L);
        long lead = 5000 + n / 2;  // all sent before the first is due
        long start = System.currentTimeMillis() + lead;
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
        java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger sendErrors = new java.util.concurrent.atomic.AtomicInteger();
        List<java.util.concurrent.Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            fs.add(pool.submit(() -> {
                int i;
                while ((i = next.getAndIncrement()) < n) {
                    long at = start + (long) (i * window * 1000 / n);
                    Message m = new Message(topic, Long.toString(at).getBytes(java.nio.charset.StandardCharsets.US_ASCII));
                    m.setDeliverTimeMs(at);
                    try {
                        p.send(m);
                    } catch (Exception e) {
                        sendErrors.incrementAndGet();
                    }
                }
                return null;
            }));
        }
        for (java.util.concurrent.Future<?> f : fs) f.get();
        pool.shutdown();
        long sentAt = System.currentTimeMillis();
        long deadline = start + (long) (window * 1000) + 60_000;
        while (got.get() < n - sendErrors.get() && System.currentTimeMillis() < deadline) Thread.sleep(50);
        int received = Math.min(got.get(), n);
        long[] sorted = java.util.Arrays.copyOf(errors, received);
        java.util.Arrays.sort(sorted);
        int early = 0;
        for (long e : sorted) if (e < 0) early++;
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("n", n);
        r.put("window_s", window);
        r.put("send_s", (sentAt - (start - lead)) / 1000.0);
        r.put("send_errors", sendErrors.get());
        r.put("received", received);
        r.put("early", early);
        r.put("p50", pct(sorted, 50));
        r.put("p99", pct(sorted, 99));
        r.put("max", received > 0 ? (double) sorted[received - 1] : Double.NaN);
        c.shutdown();
        java.util.concurrent.atomic.AtomicInteger warmupErrors = new java.util.concurrent.atomic.AtomicInteger();
        sendMany(p, topic + "Plain", tput / 4, tputThreads, 0, size, warmupErrors);  // warm-up
        // plain, timer, timer, plain (halves): a broker still warming up (JIT) favours neither kind
        int half = Math.max(1, tput / 2);
        long due = System.currentTimeMillis() + 3_600_000L;
        double plainS = half / sendMany(p, topic + "Plain", half, tputThreads, 0, size, PLAIN_ERRORS);
        double timerS = half / sendMany(p, topic + "Plain", half, tputThreads, due, size, TIMER_ERRORS);
        timerS += half / sendMany(p, topic + "Plain", half, tputThreads, due, size, TIMER_ERRORS);
        plainS += half / sendMany(p, topic + "Plain", half, tputThreads, 0, size, PLAIN_ERRORS);
        r.put("plain_msgs_s", 2 * half / plainS);
        r.put("timer_msgs_s", 2 * half / timerS);
        r.put("throughput_n", 2 * half);
        r.put("throughput_threads", tputThreads);
        r.put("size", size);
        r.put("plain_errors", PLAIN_ERRORS.get());
        r.put("timer_errors", TIMER_ERRORS.get());
        System.out.println("RESULT " + json(r));
        p.shutdown();
        return 0;
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
        awaitConsuming(p, topic, ARRIVED::containsKey, 90_000L);
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
        // A batch (send(Collection) -> SEND_BATCH_MESSAGE) of timer messages: refused, as batches of delayed ones.
        Map<String, Object> b = new LinkedHashMap<>();
        List<Message> batch = new ArrayList<>();
        for (String key : new String[] {"batch1", "batch2"}) {
            Message m = new Message(topic, "TagTimer", key, ("body of " + key).getBytes("UTF-8"));
            m.setDeliverTimeMs(System.currentTimeMillis() + 2000);
            batch.add(m);
        }
        try {
            SendResult res = p.send(batch);
            b.put("status", res.getSendStatus().name());
        } catch (MQBrokerException e) {
            b.put("status", "ERROR");
            b.put("code", e.getResponseCode());
            b.put("error", e.getErrorMessage());
        }
        sends.put("batch", b);
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
