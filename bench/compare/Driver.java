// The load generator of `make bench-compare`, and the Java-client compatibility check of
// tests/compat/test_java_client.py. It drives any RocketMQ cluster (Apache RocketMQ, or ours)
// through Apache RocketMQ's own Java client: DefaultMQProducer, DefaultMQPushConsumer,
// DefaultLitePullConsumer and (to create topics) DefaultMQAdminExt.
//
//   java -cp <rocketmq jars>:<classes> Driver <command> key=value ...
//
// Commands (each prints one line "RESULT {json}" per measurement on stdout; progress on stderr):
//   topics    namesrv= topics=a,b queues=8                    create topics on every master, wait for routes
//   suite     namesrv= topic= e2eTopic= cells=produce:1,produce:16,produce:64,batch:16,consume,e2e
//             seconds=10 warmup=2 size=1024 batchSize=32 e2eRate=1000 consumeSeconds=60 expect=0
//             (expect: messages already stored in `topic` before the first cell, for "consume")
//             createTopics=a,b (created first) serverWarmup=0 (s of unmeasured 64-producer, then batch load on
//             warmupTopic) fill=0 (s of unmeasured batches into `topic`, a backlog for "consume")
//             prints "CELL <name>" on stdout as each cell (and the warm-up / fill) starts
//             omb: ombTopic= ombQueues=16 ombMaxSeconds=<seconds> ombWindow=1000 ombBacklog=1000 (0: no bound)
//             ombRates= (msgs/s; empty: ombFractions=0.25,0.5,0.8 of the maximum sustainable rate it measures
//             first): fixed-rate publish and end-to-end latency (see omb())
//   failover  namesrv= topic= killPid= oldMaster=host:port threads=8 before=5 after=3 maxWait=60 pollNameServerMs=200
//             sendTimeoutMs=3000 pauseAfterErrorMs=20 verifySeconds=60 brokerName=broker-a
//             sync sends of unique bodies; after `before` s kill -9 `killPid` (the group's master); the time until
//             the first send acknowledged by another broker (RTO), then every acknowledged body read back
//   roundtrip namesrv= topic= count=50 batches=2 batchSize=32 vip=0 consumers=push,pull timeout=30 pullTimeout=30
//             verbose=0
//             the compatibility check: sync, async and batch sends (and with vip=1 the same through the
//             VIP port), then every message back through a push consumer and a lite pull consumer
//
// Every send error (exception, or a status other than SEND_OK) and every receive problem
// (wrong body, missing or duplicate message) is counted and reported; the client retries nothing
// (retryTimesWhenSendFailed=0), so an error is never hidden by a retry.

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class Driver {
    static final AtomicInteger SEQ = new AtomicInteger();
    static final String RUN = Long.toString(System.currentTimeMillis() % 1_000_000_000L, 36);

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Driver topics|suite|roundtrip key=value ...");
            System.exit(2);
        }
        Map<String, String> o = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) o.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        int rc;
        switch (args[0]) {
            case "topics": rc = topics(o); break;
            case "suite": rc = suite(o); break;
            case "roundtrip": rc = roundtrip(o); break;
            case "failover": rc = failover(o); break;
            default:
                System.err.println("unknown command " + args[0]);
                rc = 2;
        }
        System.out.flush();
        // the client's non-daemon threads (and a consumer's shutdown) must not keep us alive
        Runtime.getRuntime().halt(rc);
    }

    // -- small helpers ------------------------------------------------------------------------

    static String opt(Map<String, String> o, String key, String dflt) {
        String v = o.get(key);
        return v == null || v.isEmpty() ? dflt : v;
    }

    static int intOpt(Map<String, String> o, String key, int dflt) {
        return Integer.parseInt(opt(o, key, Integer.toString(dflt)));
    }

    static double dblOpt(Map<String, String> o, String key, double dflt) {
        return Double.parseDouble(opt(o, key, Double.toString(dflt)));
    }

    static void log(String msg) {
        System.err.println("[driver] " + msg);
        System.err.flush();
    }

    static String unique(String prefix) {
        return prefix + "-" + RUN + "-" + SEQ.incrementAndGet();
    }

    /** A JSON object written by hand (numbers, strings, lists, maps): the only output format. */
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
        if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            return Double.isFinite(d) ? Double.toString(d) : "null";
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
        if (v instanceof Collection) {
            StringBuilder sb = new StringBuilder("[");
            for (Object x : (Collection<?>) v) {
                if (sb.length() > 1) sb.append(',');
                sb.append(json(x));
            }
            return sb.append(']').toString();
        }
        return json(v.toString());
    }

    /** "CELL <name>" on stdout as a cell starts: the runner samples broker CPU and load there. */
    static void cellStarts(String cell) {
        log("cell " + cell + " starts");
        System.out.println("CELL " + cell);
        System.out.flush();
    }

    static void result(Map<String, Object> r) {
        System.out.println("RESULT " + json(r));
        System.out.flush();
    }

    /** Errors by kind ("SendStatus FLUSH_DISK_TIMEOUT", "MQBrokerException: CODE: 2 ..."), capped. */
    static final class Errors {
        final AtomicLong count = new AtomicLong();
        final ConcurrentHashMap<String, AtomicLong> kinds = new ConcurrentHashMap<>();

        void add(String kind) {
            count.incrementAndGet();
            String k = kind.length() > 300 ? kind.substring(0, 300) : kind;
            if (kinds.size() < 12 || kinds.containsKey(k)) kinds.computeIfAbsent(k, x -> new AtomicLong()).incrementAndGet();
        }

        void add(Throwable t) {
            String kind = t.getClass().getSimpleName() + ": " + brief(t.getMessage());
            Throwable root = t;
            while (root.getCause() != null && root.getCause() != root) root = root.getCause();
            if (root != t) kind += " / cause " + root.getClass().getSimpleName() + ": " + brief(root.getMessage());
            add(kind);
        }

        static String brief(String message) {
            String m = String.valueOf(message).replace('\n', ' ');
            for (String tail : new String[] {"For more information", "See https://", "See http://"}) {
                int cut = m.indexOf(tail);
                if (cut > 0) m = m.substring(0, cut).trim();
            }
            // variable parts ("cost [214]ms") would make every occurrence a kind of its own
            return m.replaceAll("cost \\[\\d+\\]ms", "cost [..]ms")
                .replaceAll("period in queue: \\d+ms, size of queue: \\d+", "period in queue: [..]ms, size of queue: [..]");
        }

        Map<String, Object> asMap() {
            Map<String, Object> m = new LinkedHashMap<>();
            kinds.forEach((k, v) -> m.put(k, v.get()));
            return m;
        }
    }

    /** Latency samples in nanoseconds, one growable array per thread. */
    static final class Samples {
        long[] v = new long[1 << 14];
        int n;

        void add(long x) {
            if (n == v.length) v = Arrays.copyOf(v, n * 2);
            v[n++] = x;
        }
    }

    /** p50/p99/p99.9/max in milliseconds (nearest rank, as rocket.local.percentile). */
    static Map<String, Object> pcts(List<Samples> parts) {
        int total = 0;
        for (Samples s : parts) total += s.n;
        long[] all = new long[total];
        int at = 0;
        for (Samples s : parts) {
            System.arraycopy(s.v, 0, all, at, s.n);
            at += s.n;
        }
        Arrays.sort(all);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("samples", total);
        m.put("p50_ms", pct(all, 50));
        m.put("p99_ms", pct(all, 99));
        m.put("p999_ms", pct(all, 99.9));
        m.put("max_ms", total == 0 ? 0.0 : all[total - 1] / 1e6);
        return m;
    }

    static double pct(long[] sorted, double q) {
        if (sorted.length == 0) return 0.0;
        int rank = (int) Math.ceil(q / 100.0 * sorted.length) - 1;
        rank = Math.max(0, Math.min(sorted.length - 1, rank));
        return sorted[rank] / 1e6;
    }

    /** A body of `size` bytes: an 8-byte stamp (System.nanoTime() or 0), then a fixed pattern. */
    static byte[] body(int size, long stamp) {
        byte[] b = new byte[size];
        ByteBuffer.wrap(b).putLong(stamp);
        for (int i = 8; i < size; i++) b[i] = (byte) (i % 251);
        return b;
    }

    static boolean bodyOk(byte[] b, int size) {
        if (b == null || b.length != size) return false;
        for (int i = 8; i < size; i++) if (b[i] != (byte) (i % 251)) return false;
        return true;
    }

    static DefaultMQProducer producer(String ns, String group, int timeoutMs) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(ns);
        p.setInstanceName(unique("p"));
        p.setSendMsgTimeout(timeoutMs);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.start();
        return p;
    }

    /** Send until the route is known and a send succeeds (a new topic's route may lag). */
    static long prime(DefaultMQProducer p, String topic, int size, double seconds) throws Exception {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        Exception last = null;
        while (System.nanoTime() < deadline) {
            try {
                SendResult r = p.send(new Message(topic, "prime", body(size, 0)));
                if (r.getSendStatus() == SendStatus.SEND_OK) return 1;
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("no successful send to " + topic + " within " + seconds + " s", last);
    }

    /**
     * Send one "prime" message to each of {@code topic}'s queues and wait until the push consumer's listener
     * has put every one of those queues in {@code primed} (or throw after {@code seconds}): proof that it pulls
     * from every queue, which an assigned queue is not. The 5.x client's rebalance raises the subscription's
     * version and sends it in a heartbeat only if no other heartbeat holds the lock
     * (MQClientInstance.sendHeartbeatToAllBrokerWithLockV2); when one does, every pull is refused with
     * SUBSCRIPTION_NOT_LATEST (25), by Apache's broker as by ours, until the next heartbeat, up to 30 s later
     * (apache/rocketmq#2738).
     */
    static void awaitPulling(DefaultMQProducer p, String topic, int size, java.util.Set<MessageQueue> primed,
                             double seconds) throws Exception {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        List<MessageQueue> mqs = p.fetchPublishMessageQueues(topic);
        for (MessageQueue mq : mqs) p.send(new Message(topic, "prime", body(size, 0)), mq);
        while (!primed.containsAll(mqs)) {
            if (System.nanoTime() > deadline) {
                List<MessageQueue> missing = new ArrayList<>(mqs);
                missing.removeAll(primed);
                throw new IllegalStateException("the push consumer received nothing from " + missing + " within "
                                                + seconds + " s");
            }
            Thread.sleep(20);
        }
    }

    // -- topics -----------------------------------------------------------------------------------

    static int topics(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        int queues = intOpt(o, "queues", 8);
        List<String> names = Arrays.asList(opt(o, "topics", "bench").split(","));
        createTopics(ns, names, queues, dblOpt(o, "timeout", 30));
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", "topics");
        r.put("topics", names);
        r.put("queues", queues);
        result(r);
        return 0;
    }

    static void createTopics(String ns, List<String> names, int queues, double timeout) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName(unique("admin"));
        admin.start();
        try {
            long deadline = System.nanoTime() + (long) (timeout * 1e9);
            List<String> masters = new ArrayList<>();
            while (masters.isEmpty()) {
                try {
                    var info = admin.examineBrokerClusterInfo();
                    for (var bd : info.getBrokerAddrTable().values()) {
                        String addr = bd.getBrokerAddrs().get(0L);
                        if (addr != null) masters.add(addr);
                    }
                } catch (Exception e) {
                    if (System.nanoTime() > deadline) throw e;
                }
                if (masters.isEmpty()) {
                    if (System.nanoTime() > deadline) throw new IllegalStateException("no master broker registered");
                    Thread.sleep(200);
                }
            }
            for (String name : names) {
                TopicConfig tc = new TopicConfig(name, queues, queues, 6);
                for (String addr : masters) admin.createAndUpdateTopicConfig(addr, tc);
            }
            for (String name : names) {
                while (true) {
                    int seen = 0;
                    try {
                        var route = admin.examineTopicRouteInfo(name);
                        for (var qd : route.getQueueDatas()) seen += qd.getWriteQueueNums();
                    } catch (Exception e) {
                        // not routed yet
                    }
                    if (seen >= queues * masters.size()) break;
                    if (System.nanoTime() > deadline) throw new IllegalStateException("topic " + name + " not routed in time");
                    Thread.sleep(200);
                }
            }
            log("topics " + names + " with " + queues + " queues on " + masters);
        } finally {
            admin.shutdown();
        }
    }

    // -- produce ----------------------------------------------------------------------------------

    static Map<String, Object> produce(String ns, String topic, int threads, int batch, double seconds, double warmup,
                                       int size, int timeoutMs) throws Exception {
        DefaultMQProducer p = producer(ns, unique("bench-producer"), timeoutMs);
        Errors errors = new Errors();
        AtomicLong okTotal = new AtomicLong();
        AtomicLong measured = new AtomicLong();
        List<Samples> lat = new ArrayList<>();
        try {
            okTotal.addAndGet(prime(p, topic, size, 30));
            byte[] payload = body(size, 0);
            long start = System.nanoTime();
            long measureFrom = start + (long) (warmup * 1e9);
            long stopAt = measureFrom + (long) (seconds * 1e9);
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Samples mine = new Samples();
                lat.add(mine);
                Thread th = new Thread(() -> {
                    List<Message> msgs = new ArrayList<>(batch);
                    while (true) {
                        long s = System.nanoTime();
                        if (s >= stopAt) return;
                        boolean ok = false;
                        try {
                            SendResult r;
                            if (batch == 1) {
                                r = p.send(new Message(topic, "bench", payload));
                            } else {
                                msgs.clear();
                                for (int i = 0; i < batch; i++) msgs.add(new Message(topic, "bench", payload));
                                r = p.send(msgs);
                            }
                            if (r.getSendStatus() == SendStatus.SEND_OK) ok = true;
                            else errors.add("SendStatus " + r.getSendStatus());
                        } catch (Throwable ex) {
                            errors.add(ex);
                        }
                        long done = System.nanoTime();
                        if (ok) {
                            okTotal.addAndGet(batch);
                            if (s >= measureFrom && done <= stopAt) {
                                measured.addAndGet(batch);
                                mine.add(done - s);
                            }
                        }
                    }
                }, "send-" + t);
                ts.add(th);
            }
            for (Thread th : ts) th.start();
            for (Thread th : ts) th.join();
        } finally {
            p.shutdown();
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", batch == 1 ? "produce:" + threads : "batch:" + threads);
        r.put("threads", threads);
        r.put("batch", batch);
        r.put("seconds", seconds);
        r.put("messages", measured.get());
        r.put("tps", measured.get() / seconds);
        r.put("latency", pcts(lat));
        r.put("sent_ok", okTotal.get());
        r.put("errors", errors.count.get());
        r.put("error_kinds", errors.asMap());
        return r;
    }

    // -- consume ----------------------------------------------------------------------------------

    /** Which queue offsets were seen (per queue id): counts unique and duplicate deliveries. */
    static final class Seen {
        final ConcurrentHashMap<Integer, BitSet> queues = new ConcurrentHashMap<>();
        final AtomicLong unique = new AtomicLong();
        final AtomicLong duplicates = new AtomicLong();

        boolean mark(MessageExt m) {
            BitSet bits = queues.computeIfAbsent(m.getQueueId(), q -> new BitSet());
            synchronized (bits) {
                int off = (int) m.getQueueOffset();
                if (bits.get(off)) {
                    duplicates.incrementAndGet();
                    return false;
                }
                bits.set(off);
            }
            unique.incrementAndGet();
            return true;
        }
    }

    static DefaultMQPushConsumer pushConsumer(String ns, String group, String topic, int batchMax) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(unique("c"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(batchMax);
        c.subscribe(topic, "*");
        return c;
    }

    static Map<String, Object> consume(String ns, String topic, long expect, double maxSeconds, int size) throws Exception {
        Seen seen = new Seen();
        Errors errors = new Errors();
        AtomicLong first = new AtomicLong();
        AtomicLong last = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        DefaultMQPushConsumer c = pushConsumer(ns, unique("bench-consume"), topic, 32);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            first.compareAndSet(0, now);
            for (MessageExt m : msgs) {
                if (!bodyOk(m.getBody(), size) && !"prime".equals(m.getTags())) errors.add("wrong body");
                seen.mark(m);
            }
            last.set(System.nanoTime());
            if (seen.unique.get() >= expect) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long started = System.nanoTime();
        c.start();
        boolean complete = done.await((long) (maxSeconds * 1000), TimeUnit.MILLISECONDS);
        c.shutdown();
        double span = (last.get() - first.get()) / 1e9;
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", "consume");
        r.put("expected", expect);
        r.put("messages", seen.unique.get());
        r.put("seconds", span);
        r.put("tps", span > 0 ? seen.unique.get() / span : 0.0);
        r.put("first_message_after_s", first.get() == 0 ? -1.0 : (first.get() - started) / 1e9);
        r.put("complete", complete);
        r.put("duplicates", seen.duplicates.get());
        r.put("missing", Math.max(0, expect - seen.unique.get()));
        if (!complete) errors.add("time limit: " + seen.unique.get() + " of " + expect + " received in " + maxSeconds + " s");
        r.put("errors", errors.count.get());
        r.put("error_kinds", errors.asMap());
        return r;
    }

    // -- end to end -------------------------------------------------------------------------------

    static Map<String, Object> e2e(String ns, String topic, double rate, double seconds, double warmup,
                                   int size, int timeoutMs) throws Exception {
        Samples e2e = new Samples();
        Samples storeLat = new Samples();
        Seen seen = new Seen();
        Errors errors = new Errors();
        AtomicLong measureFrom = new AtomicLong(Long.MAX_VALUE);
        java.util.Set<MessageQueue> primed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer(ns, unique("bench-e2e"), topic, 1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            for (MessageExt m : msgs) {
                if ("prime".equals(m.getTags())) {
                    primed.add(ctx.getMessageQueue());
                    continue;
                }
                if (!bodyOk(m.getBody(), size)) {
                    errors.add("wrong body");
                    continue;
                }
                if (!seen.mark(m)) continue;
                long sent = ByteBuffer.wrap(m.getBody()).getLong();
                if (sent >= measureFrom.get()) {
                    synchronized (e2e) {
                        e2e.add(now - sent);
                        storeLat.add((m.getStoreTimestamp() - m.getBornTimestamp()) * 1_000_000L);
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = producer(ns, unique("bench-e2e-producer"), timeoutMs);
        AtomicLong sentOk = new AtomicLong();
        try {
            prime(p, topic, size, 30);
            awaitPulling(p, topic, size, primed, 60);
            int threads = 4;
            long start = System.nanoTime();
            measureFrom.set(start + (long) (warmup * 1e9));
            long stopAt = start + (long) ((warmup + seconds) * 1e9);
            long interval = (long) (threads * 1e9 / rate);
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final long offset = t * interval / threads;
                Thread th = new Thread(() -> {
                    long next = start + offset;
                    while (true) {
                        long now = System.nanoTime();
                        if (next >= stopAt) return;
                        if (now < next) LockSupportPark.parkNanos(next - now);
                        next += interval;
                        try {
                            SendResult r = p.send(new Message(topic, "e2e", body(size, System.nanoTime())));
                            if (r.getSendStatus() == SendStatus.SEND_OK) sentOk.incrementAndGet();
                            else errors.add("SendStatus " + r.getSendStatus());
                        } catch (Throwable e) {
                            errors.add(e);
                        }
                    }
                }, "e2e-send-" + t);
                ts.add(th);
            }
            for (Thread th : ts) th.start();
            for (Thread th : ts) th.join();
            long wait = System.nanoTime() + 15_000_000_000L;
            while (seen.unique.get() < sentOk.get() && System.nanoTime() < wait) Thread.sleep(20);
        } finally {
            p.shutdown();
            c.shutdown();
        }
        long missing = Math.max(0, sentOk.get() - seen.unique.get());
        if (missing > 0) errors.add("missing: " + missing + " of " + sentOk.get() + " sent not received within 15 s");
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", "e2e");
        r.put("rate", rate);
        r.put("sent_ok", sentOk.get());
        r.put("received", seen.unique.get());
        r.put("missing", missing);
        r.put("duplicates", seen.duplicates.get());
        r.put("latency", pcts(List.of(e2e)));
        r.put("store_minus_born", pcts(List.of(storeLat)));
        r.put("errors", errors.count.get());
        r.put("error_kinds", errors.asMap());
        return r;
    }

    /** LockSupport without an import clash on older compilers. */
    static final class LockSupportPark {
        static void parkNanos(long n) {
            java.util.concurrent.locks.LockSupport.parkNanos(n);
        }
    }

    // -- omb: fixed-rate latency (OpenMessaging Benchmark style) ---------------------------------

    /** One fixed-rate phase of the omb cell: its measured window [from, to) of intended send times
     *  and what was recorded for messages intended in it. */
    static final class OmbPhase {
        final String name;
        final double rate;
        final long from, to;
        final Samples pubCo = new Samples();      // ack - intended send time (coordinated-omission safe)
        final Samples pub = new Samples();        // ack - actual send time (OMB's publishLatency)
        final Samples delay = new Samples();      // actual - intended send time (OMB's publishDelayLatency)
        final Samples e2e = new Samples();        // receive - intended send time
        final AtomicLong sent = new AtomicLong();     // sends intended in the window
        final AtomicLong acked = new AtomicLong();    // of those, acknowledged (SEND_OK)
        final AtomicLong received = new AtomicLong(); // of those, received (first delivery)
        final AtomicLong receivedDuring = new AtomicLong(); // any message received while now is in [from, to)
        final Errors errors = new Errors();

        OmbPhase(String name, double rate, long from, long to) {
            this.name = name;
            this.rate = rate;
            this.from = from;
            this.to = to;
        }

        boolean holds(long intended) {
            return intended >= from && intended < to;
        }

        Map<String, Object> asMap(double seconds) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("phase", name);
            m.put("rate", rate);
            m.put("seconds", seconds);
            m.put("sent", sent.get());
            m.put("acked", acked.get());
            m.put("received", received.get());
            m.put("achieved_rate", acked.get() / seconds);
            m.put("consume_rate", receivedDuring.get() / seconds);
            synchronized (this) {
                m.put("publish_from_intended", pcts(List.of(pubCo)));
                m.put("publish", pcts(List.of(pub)));
                m.put("publish_delay", pcts(List.of(delay)));
                m.put("e2e", pcts(List.of(e2e)));
            }
            m.put("errors", errors.count.get());
            m.put("error_kinds", errors.asMap());
            return m;
        }
    }

    /**
     * The omb cell, after the OpenMessaging Benchmark's workloads/1-topic-16-partitions-1kb.yaml: one
     * topic of `queues` (16) queues, `size`-byte bodies, one producer (async sends, as OMB's RocketMQ
     * driver: DefaultMQProducer.send(msg, SendCallback)) and one push consumer. First the maximum:
     * unpaced async sends with at most `window` unanswered and at most `backlog` acknowledged but not yet
     * received (0: no such bound) for `warmup` + `maxSeconds` s (acknowledged msgs/s over the last
     * `maxSeconds`): the highest rate the consumer keeps up with, as OMB's RateController (which ramps the
     * rate down once the receive backlog passes its RECEIVE_BACKLOG_LIMIT, 1000). Then one phase per rate (`rates`, msgs/s; when empty:
     * `fractions` of that maximum): a single thread paces sends open-loop at fixed intended times
     * (start + i / rate, OMB's UniformRateLimiter), `warmup` s unmeasured then `seconds` s measured.
     * Latencies of messages intended in the measured window: publish from the intended send time
     * (coordinated-omission safe), publish from the actual send (OMB's publishLatency), the send delay
     * (OMB's publishDelayLatency) and end to end, receive - intended send time (the body carries it).
     * Between phases the consumer drains (every acknowledged message must arrive within 15 s).
     */
    static Map<String, Object> omb(String ns, String topic, int queues, int size, double seconds, double warmup,
                                   double maxSeconds, List<Double> rates, List<Double> fractions, int window,
                                   int backlog, int timeoutMs) throws Exception {
        createTopics(ns, List.of(topic), queues, 60);
        List<OmbPhase> phases = new java.util.concurrent.CopyOnWriteArrayList<>();
        Seen seen = new Seen();
        Errors consumeErrors = new Errors();
        AtomicLong receivedAll = new AtomicLong();
        java.util.Set<MessageQueue> primed = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer(ns, unique("bench-omb"), topic, 1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.nanoTime();
            for (MessageExt m : msgs) {
                if ("prime".equals(m.getTags())) {
                    primed.add(ctx.getMessageQueue());
                    continue;
                }
                if (!bodyOk(m.getBody(), size)) {
                    consumeErrors.add("wrong body");
                    continue;
                }
                if (!seen.mark(m)) continue;
                receivedAll.incrementAndGet();
                long intended = ByteBuffer.wrap(m.getBody()).getLong();
                for (OmbPhase ph : phases) {
                    if (ph.holds(now)) ph.receivedDuring.incrementAndGet();
                    if (ph.holds(intended)) {
                        ph.received.incrementAndGet();
                        synchronized (ph) {
                            ph.e2e.add(now - intended);
                        }
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = producer(ns, unique("bench-omb-producer"), timeoutMs);
        AtomicLong ackedAll = new AtomicLong();
        AtomicLong pending = new AtomicLong();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", "omb");
        r.put("queues", queues);
        r.put("size", size);
        r.put("window", window);
        try {
            prime(p, topic, size, 30);
            awaitPulling(p, topic, size, primed, 60);

            // 1. the maximum sustainable rate: unpaced, at most `window` unanswered and at most `backlog`
            //    acknowledged but not yet received (OMB's RateController ramps down past its
            //    RECEIVE_BACKLOG_LIMIT, 1000 by default: its maximum is one the consumer keeps up with)
            long start = System.nanoTime();
            OmbPhase max = new OmbPhase("max", 0, start + (long) (warmup * 1e9), start + (long) ((warmup + maxSeconds) * 1e9));
            phases.add(max);
            java.util.concurrent.Semaphore inFlight = new java.util.concurrent.Semaphore(window);
            long backlogWaits = 0;
            while (true) {
                inFlight.acquire();
                long now = System.nanoTime();
                if (backlog > 0 && ackedAll.get() - receivedAll.get() > backlog) {
                    backlogWaits++;
                    while (ackedAll.get() - receivedAll.get() > backlog && (now = System.nanoTime()) < max.to) {
                        LockSupportPark.parkNanos(100_000L);
                    }
                }
                if (now >= max.to) {
                    inFlight.release();
                    break;
                }
                sendOne(p, topic, size, now, now, max, inFlight, ackedAll, pending);
            }
            r.put("backlog", backlog);
            r.put("backlog_waits", backlogWaits);
            inFlight.acquire(window);
            inFlight.release(window);
            double maxRate = max.acked.get() / maxSeconds;
            r.put("max_rate", maxRate);
            r.put("max", max.asMap(maxSeconds));
            drain(seen, ackedAll, 30, consumeErrors, "after the maximum");

            // 2. the fixed rates
            List<Double> use = new ArrayList<>(rates);
            r.put("rates_from", rates.isEmpty() ? "own maximum" : "given");
            if (use.isEmpty()) for (double f : fractions) use.add((double) Math.max(1, Math.round(f * maxRate)));
            r.put("fractions", fractions);
            r.put("rates", use);
            List<Object> out = new ArrayList<>();
            for (double rate : use) {
                long interval = Math.max(1, Math.round(1e9 / rate));
                long t0 = System.nanoTime() + 20_000_000L;
                OmbPhase ph = new OmbPhase("rate", rate, t0 + (long) (warmup * 1e9), t0 + (long) ((warmup + seconds) * 1e9));
                phases.add(ph);
                for (long i = 0; ; i++) {
                    long intended = t0 + i * interval;
                    if (intended >= ph.to) break;
                    long now;
                    while ((now = System.nanoTime()) < intended) LockSupportPark.parkNanos(intended - now);
                    sendOne(p, topic, size, intended, now, ph, null, ackedAll, pending);
                }
                long wait = System.nanoTime() + 15_000_000_000L;
                while (pending.get() > 0 && System.nanoTime() < wait) Thread.sleep(5);
                drain(seen, ackedAll, 15, ph.errors, "after the rate " + rate);
                long missing = Math.max(0, ph.acked.get() - ph.received.get());
                if (missing > 0) ph.errors.add("missing: " + missing + " acknowledged messages not received");
                out.add(ph.asMap(seconds));
                log("omb at " + rate + " msgs/s: " + ph.acked.get() + " acked, " + ph.received.get() + " received");
            }
            r.put("phases", out);
        } finally {
            p.shutdown();
            c.shutdown();
        }
        long errors = consumeErrors.count.get();
        Map<String, Object> kinds = new LinkedHashMap<>(consumeErrors.asMap());
        for (OmbPhase ph : phases) {
            errors += ph.errors.count.get();
            ph.errors.asMap().forEach((k, v) -> kinds.merge(k, v, (x, y) -> (Long) x + (Long) y));
        }
        r.put("duplicates", seen.duplicates.get());
        r.put("errors", errors);
        r.put("error_kinds", kinds);
        return r;
    }

    /** One async send of a body stamped with `intended` (System.nanoTime()); the callback records
     *  its latencies into `ph` when `intended` is in its window and releases `permits` (if any). */
    static void sendOne(DefaultMQProducer p, String topic, int size, long intended, long sendTime, OmbPhase ph,
                        java.util.concurrent.Semaphore permits, AtomicLong ackedAll, AtomicLong pending) {
        boolean counted = ph.holds(intended);
        if (counted) ph.sent.incrementAndGet();
        pending.incrementAndGet();
        try {
            p.send(new Message(topic, "omb", body(size, intended)), new SendCallback() {
                public void onSuccess(SendResult s) {
                    long now = System.nanoTime();
                    if (s.getSendStatus() == SendStatus.SEND_OK) {
                        ackedAll.incrementAndGet();
                        if (counted) {
                            ph.acked.incrementAndGet();
                            synchronized (ph) {
                                ph.pubCo.add(now - intended);
                                ph.pub.add(now - sendTime);
                                ph.delay.add(sendTime - intended);
                            }
                        }
                    } else {
                        ph.errors.add("SendStatus " + s.getSendStatus());
                    }
                    pending.decrementAndGet();
                    if (permits != null) permits.release();
                }

                public void onException(Throwable e) {
                    ph.errors.add(e);
                    pending.decrementAndGet();
                    if (permits != null) permits.release();
                }
            });
        } catch (Throwable e) {
            ph.errors.add(e);
            pending.decrementAndGet();
            if (permits != null) permits.release();
        }
    }

    /** Waits up to `seconds` until the consumer has every acknowledged message; else an error. */
    static void drain(Seen seen, AtomicLong acked, double seconds, Errors errors, String when) throws InterruptedException {
        long wait = System.nanoTime() + (long) (seconds * 1e9);
        while (seen.unique.get() < acked.get() && System.nanoTime() < wait) Thread.sleep(10);
        if (seen.unique.get() < acked.get()) {
            errors.add("consumer " + (acked.get() - seen.unique.get()) + " behind " + when + " (" + seconds + " s)");
        }
    }

    static List<Double> doubles(String csv) {
        List<Double> out = new ArrayList<>();
        for (String x : csv.split(",")) if (!x.isBlank()) out.add(Double.parseDouble(x.trim()));
        return out;
    }

    // -- failover ---------------------------------------------------------------------------------

    /** A body of `size` bytes: the id, '|', then padding. */
    static byte[] idBody(String id, int size) {
        byte[] b = new byte[Math.max(size, id.length() + 1)];
        Arrays.fill(b, (byte) '.');
        byte[] head = (id + "|").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        System.arraycopy(head, 0, b, 0, head.length);
        return b;
    }

    static String idOf(byte[] body) {
        for (int i = 0; i < body.length; i++) if (body[i] == '|') return new String(body, 0, i, java.nio.charset.StandardCharsets.US_ASCII);
        return null;
    }

    /** The port of the broker that stored a message, from its offset message id (MessageDecoder's format). */
    static int storePort(String offsetMsgId) {
        try {
            return ((java.net.InetSocketAddress) MessageDecoder.decodeMessageId(offsetMsgId).getAddress()).getPort();
        } catch (Exception e) {
            return -1;
        }
    }

    /**
     * One kill -9 of the group's master under load, timed in this process (one clock): `threads` sync
     * senders (no client retries; `pauseAfterErrorMs` after a failed send) send unique bodies; after
     * `before` s the master's process (`killPid`) gets SIGKILL (ProcessHandle.destroyForcibly); RTO is the
     * time from then until the first send acknowledged by a broker other than `oldMaster` (the store
     * address in the offset message id). The producer polls the NameServer every `pollNameServerMs`
     * (the client's default is 30 s). Sending goes on `after` s more; then a pull consumer reads the topic
     * back from the group (every queue from offset 0) and every acknowledged body must be there.
     */
    static int failover(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = o.get("topic");
        String brokerName = opt(o, "brokerName", "broker-a");
        int threads = intOpt(o, "threads", 8);
        int size = intOpt(o, "size", 1024);
        double before = dblOpt(o, "before", 5);
        double after = dblOpt(o, "after", 3);
        double maxWait = dblOpt(o, "maxWait", 60);
        long killPid = Long.parseLong(o.get("killPid"));
        String oldMaster = o.get("oldMaster");
        int oldPort = Integer.parseInt(oldMaster.substring(oldMaster.lastIndexOf(':') + 1));
        int timeoutMs = intOpt(o, "sendTimeoutMs", 3000);
        int pollMs = intOpt(o, "pollNameServerMs", 200);
        int pauseMs = intOpt(o, "pauseAfterErrorMs", 20);
        double verifySeconds = dblOpt(o, "verifySeconds", 60);

        ProcessHandle victim = ProcessHandle.of(killPid).orElseThrow(() -> new IllegalArgumentException("no process " + killPid));
        DefaultMQProducer p = new DefaultMQProducer(unique("fo-producer"));
        p.setNamesrvAddr(ns);
        p.setInstanceName(unique("fo"));
        p.setSendMsgTimeout(timeoutMs);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.setPollNameServerInterval(pollMs);
        p.start();
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName(unique("fo-admin"));
        admin.start();

        ConcurrentHashMap<String, Long> acked = new ConcurrentHashMap<>();  // id -> when acknowledged (nanoTime)
        Errors errors = new Errors();
        AtomicLong killAt = new AtomicLong(0);
        AtomicLong firstNew = new AtomicLong(Long.MAX_VALUE);
        AtomicLong lastFailure = new AtomicLong(0);
        AtomicLong failedAfterKill = new AtomicLong();
        AtomicLong ackedOldAfterKill = new AtomicLong();
        AtomicReference<String> newMaster = new AtomicReference<>();
        AtomicLong stopAt = new AtomicLong(Long.MAX_VALUE);
        long routedAt = 0;
        try {
            prime(p, topic, size, 30);
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int me = t;
                Thread th = new Thread(() -> {
                    long seq = 0;
                    while (System.nanoTime() < stopAt.get()) {
                        String id = RUN + "-" + me + "-" + (seq++);
                        boolean ok = false;
                        try {
                            SendResult r = p.send(new Message(topic, "fo", id, idBody(id, size)));
                            long now = System.nanoTime();
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                ok = true;
                                acked.put(id, now);
                                long k = killAt.get();
                                if (k != 0 && now > k) {
                                    int port = storePort(r.getOffsetMsgId());
                                    if (port != oldPort) {
                                        firstNew.accumulateAndGet(now, Math::min);
                                        newMaster.compareAndSet(null, r.getOffsetMsgId());
                                    } else {
                                        ackedOldAfterKill.incrementAndGet();
                                    }
                                }
                            } else {
                                errors.add("SendStatus " + r.getSendStatus());
                            }
                        } catch (Throwable e) {
                            errors.add(e);
                        }
                        if (!ok) {
                            long now = System.nanoTime();
                            if (killAt.get() != 0) {
                                failedAfterKill.incrementAndGet();
                                lastFailure.accumulateAndGet(now, Math::max);
                            }
                            LockSupportPark.parkNanos(pauseMs * 1_000_000L);
                        }
                    }
                }, "fo-send-" + t);
                ts.add(th);
            }
            for (Thread th : ts) th.start();
            Thread.sleep((long) (before * 1000));
            long ackedBefore = acked.size();
            killAt.set(System.nanoTime());
            victim.destroyForcibly();
            log("killed " + killPid + " (" + oldMaster + ") after " + ackedBefore + " acknowledged sends");
            long deadline = killAt.get() + (long) (maxWait * 1e9);
            while (System.nanoTime() < deadline) {
                if (routedAt == 0) {
                    try {
                        var bd = admin.examineBrokerClusterInfo().getBrokerAddrTable().get(brokerName);
                        String addr = bd == null ? null : bd.getBrokerAddrs().get(0L);
                        if (addr != null && !addr.equals(oldMaster)) routedAt = System.nanoTime();
                    } catch (Exception e) {
                        // the NameServer answers again in a moment
                    }
                }
                if (firstNew.get() != Long.MAX_VALUE && routedAt != 0) break;
                Thread.sleep(routedAt == 0 ? 50 : 20);
            }
            stopAt.set(System.nanoTime() + (long) (after * 1e9));
            for (Thread th : ts) th.join();
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("cell", "failover");
            r.put("old_master", oldMaster);
            long k = killAt.get();
            r.put("rto_s", firstNew.get() == Long.MAX_VALUE ? null : (firstNew.get() - k) / 1e9);
            r.put("routed_s", routedAt == 0 ? null : (routedAt - k) / 1e9);
            r.put("last_failure_s", lastFailure.get() == 0 ? null : (lastFailure.get() - k) / 1e9);
            r.put("new_master_msg_id", newMaster.get());
            r.put("threads", threads);
            r.put("acked", acked.size());
            r.put("acked_before_kill", ackedBefore);
            r.put("acked_old_master_after_kill", ackedOldAfterKill.get());
            r.put("failed_sends", errors.count.get());
            r.put("failed_after_kill", failedAfterKill.get());
            r.put("error_kinds", errors.asMap());
            p.shutdown();
            verify(ns, topic, acked.keySet(), verifySeconds, r);
            result(r);
            return 0;
        } finally {
            p.shutdown();
            admin.shutdown();
        }
    }

    /** Reads `topic` back (every queue from offset 0, a pull consumer) until every id of `acked` was seen
     * or `seconds` passed; puts read / lost / duplicates into `r`. */
    static void verify(String ns, String topic, java.util.Set<String> acked, double seconds, Map<String, Object> r)
            throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(unique("fo-check"));
        c.setNamesrvAddr(ns);
        c.setInstanceName(unique("fo-check"));
        c.start();
        Map<String, Integer> seen = new HashMap<>();
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        int passes = 0;
        try {
            while (System.nanoTime() < deadline) {
                passes++;
                seen.clear();
                try {
                    for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
                        long offset = 0;
                        while (System.nanoTime() < deadline) {
                            PullResult pr = c.pull(mq, "*", offset, 32);
                            if (pr.getPullStatus() == org.apache.rocketmq.client.consumer.PullStatus.FOUND) {
                                for (MessageExt m : pr.getMsgFoundList()) {
                                    String id = "fo".equals(m.getTags()) ? idOf(m.getBody()) : null;
                                    if (id != null) seen.merge(id, 1, Integer::sum);
                                }
                            } else if (pr.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.NO_MATCHED_MSG) {
                                break;
                            }
                            if (pr.getNextBeginOffset() <= offset) break;
                            offset = pr.getNextBeginOffset();
                        }
                    }
                } catch (Exception e) {
                    log("verify: " + e);
                    Thread.sleep(500);
                    continue;
                }
                if (seen.keySet().containsAll(acked)) break;
                Thread.sleep(1000);  // a replica still catching up: read again
            }
        } finally {
            c.shutdown();
        }
        List<String> lost = new ArrayList<>();
        for (String id : acked) if (!seen.containsKey(id)) lost.add(id);
        long dups = 0;
        for (int n : seen.values()) if (n > 1) dups += n - 1;
        r.put("read", seen.size());
        r.put("lost", lost.size());
        r.put("lost_examples", lost.subList(0, Math.min(5, lost.size())));
        r.put("duplicates", dups);
        r.put("verify_passes", passes);
    }

    // -- suite ------------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    static int suite(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = opt(o, "topic", "bench");
        String e2eTopic = opt(o, "e2eTopic", topic + "-e2e");
        double seconds = dblOpt(o, "seconds", 10);
        double warmup = dblOpt(o, "warmup", 2);
        int size = intOpt(o, "size", 1024);
        int batchSize = intOpt(o, "batchSize", 32);
        int queues = intOpt(o, "queues", 8);
        int timeoutMs = intOpt(o, "sendTimeoutMs", 10_000);
        double consumeSeconds = dblOpt(o, "consumeSeconds", 60);
        double e2eRate = dblOpt(o, "e2eRate", 1000);
        long stored = Long.parseLong(opt(o, "expect", "0"));  // messages already in `topic`
        int failed = 0;
        String create = opt(o, "createTopics", "");
        if (!create.isEmpty()) createTopics(ns, Arrays.asList(create.split(",")), queues, dblOpt(o, "topicTimeout", 60));
        double serverWarmup = dblOpt(o, "serverWarmup", 0);
        if (serverWarmup > 0) {
            // unmeasured load on a fresh cluster (a JVM broker's JIT compiles its hot paths; the same for ours)
            String warmTopic = opt(o, "warmupTopic", topic + "-warmup");
            cellStarts("server-warmup");
            Map<String, Object> a = produce(ns, warmTopic, 64, 1, serverWarmup / 2, 0, size, timeoutMs);
            Map<String, Object> b = produce(ns, warmTopic, 16, batchSize, serverWarmup / 2, 0, size, timeoutMs);
            Map<String, Object> w = new LinkedHashMap<>();
            w.put("cell", "server-warmup");
            w.put("seconds", serverWarmup);
            w.put("tps", List.of(a.get("tps"), b.get("tps")));
            w.put("errors", (Long) a.get("errors") + (Long) b.get("errors"));
            Map<String, Object> kinds = new LinkedHashMap<>((Map<String, Object>) a.get("error_kinds"));
            ((Map<String, Object>) b.get("error_kinds")).forEach((k, v) -> kinds.merge(k, v, (x, y) -> (Long) x + (Long) y));
            w.put("error_kinds", kinds);
            result(w);
        }
        double fill = dblOpt(o, "fill", 0);
        if (fill > 0) {
            // an unmeasured backlog for a consume cell run without produce cells before it
            cellStarts("fill");
            Map<String, Object> f = produce(ns, topic, 16, batchSize, fill, 0, size, timeoutMs);
            f.put("cell", "fill");
            stored += (Long) f.get("sent_ok");
            result(f);
        }
        for (String cell : opt(o, "cells", "produce:1,produce:16,produce:64,batch:16,consume,e2e").split(",")) {
            cellStarts(cell);
            Map<String, Object> r;
            try {
                String[] parts = cell.split(":");
                switch (parts[0]) {
                    case "produce":
                        r = produce(ns, topic, Integer.parseInt(parts[1]), 1, seconds, warmup, size, timeoutMs);
                        stored += (Long) r.get("sent_ok");
                        break;
                    case "batch":
                        r = produce(ns, topic, Integer.parseInt(parts[1]), batchSize, seconds, warmup, size, timeoutMs);
                        stored += (Long) r.get("sent_ok");
                        break;
                    case "consume":
                        r = consume(ns, topic, stored, consumeSeconds, size);
                        break;
                    case "e2e":
                        r = e2e(ns, e2eTopic, e2eRate, seconds, warmup, size, timeoutMs);
                        break;
                    case "omb":
                        r = omb(ns, opt(o, "ombTopic", topic + "-omb"), intOpt(o, "ombQueues", 16), size, seconds,
                                warmup, dblOpt(o, "ombMaxSeconds", seconds), doubles(opt(o, "ombRates", "")),
                                doubles(opt(o, "ombFractions", "0.25,0.5,0.8")), intOpt(o, "ombWindow", 1000),
                                intOpt(o, "ombBacklog", 1000), timeoutMs);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown cell " + cell);
                }
            } catch (Throwable t) {
                failed++;
                r = new LinkedHashMap<>();
                r.put("cell", cell);
                r.put("failed", t.toString() + (t.getCause() != null ? " / cause: " + t.getCause() : ""));
                r.put("errors", 1);
                log("cell " + cell + " failed: " + t);
            }
            result(r);
        }
        return failed == 0 ? 0 : 1;
    }

    // -- roundtrip (compatibility check) ----------------------------------------------------------

    static int roundtrip(Map<String, String> o) throws Exception {
        String ns = o.get("namesrv");
        String topic = opt(o, "topic", unique("compat"));
        int count = intOpt(o, "count", 50);
        int batches = intOpt(o, "batches", 2);
        int batchSize = intOpt(o, "batchSize", 32);
        int size = intOpt(o, "size", 1024);
        double timeout = dblOpt(o, "timeout", 30);  // for the push consumer
        double pullTimeout = dblOpt(o, "pullTimeout", timeout);
        int queues = intOpt(o, "queues", 4);
        boolean vip = "1".equals(o.get("vip"));
        boolean verbose = "1".equals(o.get("verbose"));
        List<String> consumers = Arrays.asList(opt(o, "consumers", "push,pull").split(","));
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("cell", "roundtrip");
        r.put("topic", topic);

        Errors sendErrors = new Errors();
        try {
            createTopics(ns, List.of(topic), queues, 20);
        } catch (Exception e) {
            sendErrors.add(e);
            r.put("send_errors", sendErrors.count.get());
            r.put("send_error_kinds", sendErrors.asMap());
            result(r);
            return 1;
        }
        Map<String, String> expected = new ConcurrentHashMap<>();  // client message id -> kind
        Map<String, Long> sent = new LinkedHashMap<>();
        DefaultMQProducer p = producer(ns, unique("compat-producer"), 5000);
        try {
            sendAll(p, topic, "", count, batches, batchSize, size, expected, sent, sendErrors);
        } finally {
            p.shutdown();
        }
        if (vip) {
            // the same again through the broker's VIP ("fast") port, listenPort - 2
            DefaultMQProducer v = new DefaultMQProducer(unique("compat-vip-producer"));
            v.setNamesrvAddr(ns);
            v.setInstanceName(unique("vip"));
            v.setSendMsgTimeout(5000);
            v.setRetryTimesWhenSendFailed(0);
            v.setRetryTimesWhenSendAsyncFailed(0);
            v.setVipChannelEnabled(true);
            v.start();
            try {
                sendAll(v, topic, "vip-", Math.max(1, count / 5), Math.min(1, batches), batchSize, size, expected, sent,
                        sendErrors);
            } finally {
                v.shutdown();
            }
        }
        r.put("sent", sent);
        r.put("send_errors", sendErrors.count.get());
        r.put("send_error_kinds", sendErrors.asMap());
        log("sent " + sent + "; errors " + sendErrors.count.get() + " " + sendErrors.asMap());

        int rc = sendErrors.count.get() == 0 ? 0 : 1;
        if (consumers.contains("push")) {
            // a DefaultMQPushConsumer: everything, with the tags, keys, property and body it was sent with
            Errors errors = new Errors();
            Map<String, Integer> pushed = new ConcurrentHashMap<>();
            Seen seen = new Seen();  // by queue offset
            DefaultMQPushConsumer c = pushConsumer(ns, unique("compat-push"), topic, 1);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (verbose) log("push got " + describe(m) + (expected.containsKey(m.getMsgId()) ? "" : " (UNEXPECTED)"));
                    checkMessage(m, size, errors);
                    seen.mark(m);
                    pushed.merge(m.getMsgId(), 1, Integer::sum);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            long deadline = System.nanoTime() + (long) (timeout * 1e9);
            // done when every message sent here arrived (the topic may hold older ones too; queue offsets
            // repeat across brokers, so they cannot count arrivals)
            while (!pushed.keySet().containsAll(expected.keySet()) && System.nanoTime() < deadline) Thread.sleep(50);
            Thread.sleep(300);  // a duplicate delivery would show now
            c.shutdown();
            rc |= report(r, "push", expected, pushed, errors);
        }
        if (consumers.contains("pull")) {
            // a DefaultLitePullConsumer (subscribe mode) of another group: the same messages again
            Errors errors = new Errors();
            Map<String, Integer> pulled = new ConcurrentHashMap<>();
            DefaultLitePullConsumer lp = new DefaultLitePullConsumer(unique("compat-pull"));
            lp.setNamesrvAddr(ns);
            lp.setInstanceName(unique("lp"));
            lp.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            lp.subscribe(topic, "*");
            lp.start();
            long deadline = System.nanoTime() + (long) (pullTimeout * 1e9);
            Seen seen = new Seen();
            try {
                while (!pulled.keySet().containsAll(expected.keySet()) && System.nanoTime() < deadline) {
                    for (MessageExt m : lp.poll(500)) {
                        if (verbose) log("pull got " + describe(m));
                        checkMessage(m, size, errors);
                        seen.mark(m);
                        pulled.merge(m.getMsgId(), 1, Integer::sum);
                    }
                }
            } finally {
                lp.shutdown();
            }
            rc |= report(r, "pull", expected, pulled, errors);
        }
        result(r);
        return rc;
    }

    /** `count` sync sends (SEND_MESSAGE_V2), `count` async sends, `batches` batches (SEND_BATCH_MESSAGE). */
    static void sendAll(DefaultMQProducer p, String topic, String label, int count, int batches, int batchSize, int size,
                        Map<String, String> expected, Map<String, Long> sent, Errors errors) throws Exception {
        long sync = 0, inBatches = 0;
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "tagA", label + "key-" + i, body(size, i));
            m.putUserProperty("seq", Integer.toString(i));
            try {
                SendResult s = p.send(m);
                if (s.getSendStatus() == SendStatus.SEND_OK) {
                    expected.put(s.getMsgId(), label + "sync");
                    sync++;
                } else {
                    errors.add(label + "sync SendStatus " + s.getSendStatus());
                }
            } catch (Throwable e) {
                errors.add(e);
            }
        }
        CountDownLatch asyncDone = new CountDownLatch(count);
        AtomicLong asyncOk = new AtomicLong();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "tagB", label + "akey-" + i, body(size, i));
            p.send(m, new SendCallback() {
                public void onSuccess(SendResult s) {
                    if (s.getSendStatus() == SendStatus.SEND_OK) {
                        expected.put(s.getMsgId(), label + "async");
                        asyncOk.incrementAndGet();
                    } else {
                        errors.add(label + "async SendStatus " + s.getSendStatus());
                    }
                    asyncDone.countDown();
                }

                public void onException(Throwable e) {
                    errors.add(e);
                    asyncDone.countDown();
                }
            });
        }
        if (!asyncDone.await(15, TimeUnit.SECONDS)) errors.add(label + "async sends not answered in 15 s");
        for (int b = 0; b < batches; b++) {
            List<Message> msgs = new ArrayList<>();
            for (int i = 0; i < batchSize; i++) msgs.add(new Message(topic, "tagC", label + "bkey-" + b + "-" + i, body(size, i)));
            try {
                SendResult s = p.send(msgs);
                if (s.getSendStatus() != SendStatus.SEND_OK) {
                    errors.add(label + "batch SendStatus " + s.getSendStatus());
                    continue;
                }
                String[] ids = s.getMsgId().split(",");
                if (ids.length != batchSize) errors.add(label + "batch result has " + ids.length + " ids, want " + batchSize);
                for (String id : ids) expected.put(id, label + "batch");
                inBatches += ids.length;
            } catch (Throwable e) {
                errors.add(e);
            }
        }
        sent.put(label + "sync", sync);
        sent.put(label + "async", asyncOk.get());
        sent.put(label + "batch", inBatches);
    }

    static void checkMessage(MessageExt m, int size, Errors errors) {
        if (m.getBody() == null || m.getBody().length != size) {
            errors.add("a body of " + (m.getBody() == null ? -1 : m.getBody().length) + " bytes, want " + size);
            return;
        }
        if (!bodyOk(m.getBody(), size)) errors.add("a body that differs from the one sent");
        String tags = m.getTags();
        String keys = m.getKeys() == null ? "" : m.getKeys();
        if ("tagA".equals(tags)) {
            long seq = ByteBuffer.wrap(m.getBody()).getLong();
            if (!keys.endsWith("key-" + seq)) errors.add("keys " + keys + " for seq " + seq);
            if (!Long.toString(seq).equals(m.getUserProperty("seq"))) errors.add("user property seq=" + m.getUserProperty("seq") + " for seq " + seq);
        } else if (!"tagB".equals(tags) && !"tagC".equals(tags)) {
            errors.add("unexpected tags " + tags);
        }
        if (m.getStoreTimestamp() < m.getBornTimestamp() - 1000) errors.add("store timestamp before born timestamp");
        if (m.getStoreHost() == null || m.getBornHost() == null) errors.add("no store/born host");
    }

    static String describe(MessageExt m) {
        return "id=" + m.getMsgId() + " q=" + m.getQueueId() + " off=" + m.getQueueOffset() + " tags=" + m.getTags()
            + " keys=" + m.getKeys() + " body=" + (m.getBody() == null ? -1 : m.getBody().length)
            + " sysFlag=" + m.getSysFlag() + " props=" + m.getProperties();
    }

    /** Puts `<how>_received/_missing/...` and `<how>_errors` into r; 1 when anything is wrong. */
    static int report(Map<String, Object> r, String how, Map<String, String> expected, Map<String, Integer> got, Errors errors) {
        Map<String, Long> missingByKind = new java.util.TreeMap<>();
        expected.forEach((k, v) -> {
            if (!got.containsKey(k)) missingByKind.merge(v, 1L, Long::sum);
        });
        long missing = missingByKind.values().stream().mapToLong(Long::longValue).sum();
        long unexpected = got.keySet().stream().filter(k -> !expected.containsKey(k)).count();
        long dups = got.values().stream().filter(v -> v > 1).count();
        r.put(how + "_received", got.size());
        r.put(how + "_missing", missing);
        r.put(how + "_missing_by_kind", missingByKind);
        r.put(how + "_unexpected_ids", unexpected);
        r.put(how + "_duplicates", dups);
        r.put(how + "_errors", errors.count.get());
        r.put(how + "_error_kinds", errors.asMap());
        log(how + ": received " + got.size() + " of " + expected.size() + " (missing " + missingByKind + ", unexpected "
            + unexpected + ", duplicates " + dups + "); errors " + errors.asMap());
        return missing == 0 && unexpected == 0 && dups == 0 && errors.count.get() == 0 ? 0 : 1;
    }
}
