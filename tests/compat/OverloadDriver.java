// Apache RocketMQ's Java client overloading one broker (tests/compat/test_overload_java.py; compiled
// by bench/compare/java.py's compile_java against the client jars). One command:
//
//   overload namesrv=H:P topic=T seconds=6 rate=0 window=0 size=1024 sendTimeoutMs=3000 verifySeconds=30
//       one DefaultMQProducer (no retries) doing async sends of bodies "<8-byte index><padding>" for
//       `seconds` s: at `rate` msgs/s (0: as fast as the client takes them), with at most `window`
//       unanswered (0: no bound, as the fixed-rate phases of Driver's omb cell). Every outcome is
//       counted by kind (ok, SYSTEM_BUSY with its remark's bracketed prefix, or the exception's
//       class, causes included). Then a DefaultLitePullConsumer reads the topic from its start and
//       reports which acknowledged indexes it did not find within `verifySeconds`. Meanwhile a
//       thread sends a heartbeat (HEART_BEAT, a sync request) every second and times it.
//
// Prints one line "RESULT {json}" on stdout at the end.
import java.nio.ByteBuffer;
import java.util.BitSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.HeartbeatData;
import org.apache.rocketmq.remoting.protocol.heartbeat.ProducerData;

public class OverloadDriver {
    static final Map<String, AtomicLong> KINDS = new ConcurrentHashMap<>();
    static final Map<String, String> SAMPLES = new ConcurrentHashMap<>();

    static void count(String kind, String sample) {
        KINDS.computeIfAbsent(kind, k -> new AtomicLong()).incrementAndGet();
        if (sample != null) SAMPLES.putIfAbsent(kind, sample);
    }

    static String kindOf(Throwable e) {
        if (e instanceof MQBrokerException) {
            MQBrokerException b = (MQBrokerException) e;
            String msg = b.getErrorMessage() == null ? "" : b.getErrorMessage();
            String prefix = msg.startsWith("[") && msg.indexOf(']') > 0 ? msg.substring(0, msg.indexOf(']') + 1) : "";
            return "broker:" + b.getResponseCode() + prefix;
        }
        StringBuilder s = new StringBuilder(e.getClass().getSimpleName());
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            s.append("<").append(c.getClass().getSimpleName());
        }
        return s.toString();
    }

    static String opt(Map<String, String> o, String k, String d) {
        return o.getOrDefault(k, d);
    }

    static String json(Object v) {
        if (v instanceof Map) {
            StringBuilder s = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (s.length() > 1) s.append(',');
                s.append(json(String.valueOf(e.getKey()))).append(':').append(json(e.getValue()));
            }
            return s.append('}').toString();
        }
        if (v instanceof Number || v instanceof Boolean) return String.valueOf(v);
        String t = String.valueOf(v);
        StringBuilder s = new StringBuilder("\"");
        for (char c : t.toCharArray()) {
            if (c == '"' || c == '\\') s.append('\\').append(c);
            else if (c < 0x20) s.append(String.format("\\u%04x", (int) c));
            else s.append(c);
        }
        return s.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new TreeMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            o.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        String ns = o.get("namesrv");
        String topic = o.get("topic");
        double seconds = Double.parseDouble(opt(o, "seconds", "6"));
        double rate = Double.parseDouble(opt(o, "rate", "0"));
        int window = Integer.parseInt(opt(o, "window", "0"));
        int size = Integer.parseInt(opt(o, "size", "1024"));
        int timeoutMs = Integer.parseInt(opt(o, "sendTimeoutMs", "3000"));
        double verifySeconds = Double.parseDouble(opt(o, "verifySeconds", "30"));

        DefaultMQProducer p = new DefaultMQProducer("overload-producer-" + System.nanoTime());
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(timeoutMs);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.start();
        byte[] pad = new byte[Math.max(0, size - 8)];
        java.util.Arrays.fill(pad, (byte) 'x');
        // the route: a first sync send of index -1 (not counted)
        long primeDeadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try {
                if (p.send(new Message(topic, body(-1, pad))).getSendStatus() == SendStatus.SEND_OK) break;
            } catch (Exception e) {
                if (System.nanoTime() > primeDeadline) throw e;
            }
            Thread.sleep(200);
        }
        BitSet acked = new BitSet();
        AtomicLong pending = new AtomicLong();
        Semaphore permits = window > 0 ? new Semaphore(window) : null;
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        // a heartbeat (a sync request on the same channel) every second, as the client's own
        // every 30 s: one that times out makes the client close the channel (clientCloseSocketIfTimeout)
        AtomicLong heartbeats = new AtomicLong();
        AtomicLong heartbeatFailures = new AtomicLong();
        AtomicLong heartbeatMaxMs = new AtomicLong();
        Thread beat = new Thread(() -> {
            while (System.nanoTime() < end) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                long t0 = System.nanoTime();
                try {
                    MQClientInstance f = p.getDefaultMQProducerImpl().getMqClientFactory();
                    HeartbeatData hb = new HeartbeatData();
                    hb.setClientID(f.getClientId());
                    ProducerData pd = new ProducerData();
                    pd.setGroupName(p.getProducerGroup());
                    hb.getProducerDataSet().add(pd);
                    String addr = f.getTopicRouteTable().get(topic).getBrokerDatas().get(0).selectBrokerAddr();
                    f.getMQClientAPIImpl().sendHeartbeat(addr, hb, 3000);
                } catch (Exception e) {
                    heartbeatFailures.incrementAndGet();
                    count("heartbeat:" + kindOf(e), String.valueOf(e.getMessage()));
                }
                long ms = (System.nanoTime() - t0) / 1_000_000;
                heartbeats.incrementAndGet();
                heartbeatMaxMs.accumulateAndGet(ms, Math::max);
            }
        }, "overload-heartbeat");
        beat.setDaemon(true);
        beat.start();
        long interval = rate > 0 ? (long) (1e9 / rate) : 0;
        int sent = 0;
        for (int i = 0; ; i++) {
            if (interval > 0) {
                long at = start + i * interval;
                long now;
                while ((now = System.nanoTime()) < at) LockSupport.parkNanos(at - now);
            }
            if (permits != null) permits.acquire();
            if (System.nanoTime() >= end) {
                if (permits != null) permits.release();
                break;
            }
            final int index = i;
            sent++;
            pending.incrementAndGet();
            try {
                p.send(new Message(topic, body(index, pad)), new SendCallback() {
                    public void onSuccess(SendResult r) {
                        if (r.getSendStatus() == SendStatus.SEND_OK) {
                            synchronized (acked) {
                                acked.set(index);
                            }
                            count("ok", null);
                        } else {
                            count("status:" + r.getSendStatus(), null);
                        }
                        pending.decrementAndGet();
                        if (permits != null) permits.release();
                    }

                    public void onException(Throwable e) {
                        count(kindOf(e), String.valueOf(e.getMessage()));
                        pending.decrementAndGet();
                        if (permits != null) permits.release();
                    }
                });
            } catch (Throwable e) {
                count("thrown:" + kindOf(e), String.valueOf(e.getMessage()));
                pending.decrementAndGet();
                if (permits != null) permits.release();
            }
        }
        double sendSeconds = (System.nanoTime() - start) / 1e9;
        beat.join(10_000);
        long wait = System.nanoTime() + (timeoutMs + 10_000L) * 1_000_000L;
        while (pending.get() > 0 && System.nanoTime() < wait) Thread.sleep(20);
        p.shutdown();

        // every acknowledged index must be stored
        BitSet missing;
        synchronized (acked) {
            missing = (BitSet) acked.clone();
        }
        long ackedCount = missing.cardinality();
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("overload-check-" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(256);
        c.setAutoCommit(false);
        c.subscribe(topic, "*");
        c.start();
        long stored = 0;
        long verifyEnd = System.nanoTime() + (long) (verifySeconds * 1e9);
        while (!missing.isEmpty() && System.nanoTime() < verifyEnd) {
            List<MessageExt> got = c.poll(500);
            for (MessageExt m : got) {
                stored++;
                int index = ByteBuffer.wrap(m.getBody()).getInt();
                if (index >= 0) missing.clear(index);
            }
        }
        c.shutdown();

        Map<String, Object> r = new TreeMap<>();
        r.put("sent", sent);
        r.put("send_seconds", sendSeconds);
        r.put("unanswered", pending.get());
        r.put("acked", ackedCount);
        r.put("read_back", stored);
        r.put("missing", missing.cardinality());
        r.put("heartbeats", heartbeats.get());
        r.put("heartbeat_failures", heartbeatFailures.get());
        r.put("heartbeat_max_ms", heartbeatMaxMs.get());
        Map<String, Object> kinds = new TreeMap<>();
        KINDS.forEach((k, v) -> kinds.put(k, v.get()));
        r.put("kinds", kinds);
        r.put("samples", new TreeMap<>(SAMPLES));
        System.out.println("RESULT " + json(r));
        System.exit(0);
    }

    static byte[] body(int index, byte[] pad) {
        ByteBuffer b = ByteBuffer.allocate(8 + pad.length);
        b.putInt(index).putInt(0).put(pad);
        return b.array();
    }
}
