// Apache RocketMQ's Java client for tests/compat/test_slave_read.py (compiled by bench/compare/java.py's
// compile_java, run on the client jars of bench/compare/java.py). Two commands, each printing one line
// "RESULT {json}" at the end:
//
//   produce namesrv=H:P topic=T count=N group=G
//       N sync sends of bodies "sr-<i>" (tag TagA); counts send statuses.
//   consume namesrv=H:P topic=T expect=N group=G timeout=SECONDS
//       a DefaultMQPushConsumer of group G (CONSUME_FROM_FIRST_OFFSET, offsets persisted every second)
//       until it has every body "sr-0" .. "sr-<N-1>" or the timeout; then it waits 3 s, prints the
//       offsets it holds in memory per queue, shuts down (persisting them) and reports what it got.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class SlaveRead {
    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) o.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        int rc;
        switch (args.length > 0 ? args[0] : "") {
            case "produce": rc = produce(o); break;
            case "consume": rc = consume(o); break;
            default:
                System.err.println("usage: SlaveRead produce|consume key=value ...");
                rc = 2;
        }
        System.exit(rc);
    }

    static int produce(Map<String, String> o) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(o.getOrDefault("group", "PG_SLAVE_READ"));
        p.setNamesrvAddr(o.get("namesrv"));
        p.setRetryTimesWhenSendFailed(0);
        p.setSendMsgTimeout(10000);
        p.start();
        int count = Integer.parseInt(o.get("count"));
        Map<String, Integer> statuses = new TreeMap<>();
        List<String> errors = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Message m = new Message(o.get("topic"), "TagA", ("sr-" + i).getBytes(StandardCharsets.UTF_8));
            try {
                SendResult r = p.send(m);
                statuses.merge(r.getSendStatus().name(), 1, Integer::sum);
            } catch (Exception e) {
                statuses.merge("EXCEPTION", 1, Integer::sum);
                if (errors.size() < 5) errors.add(e.toString());
            }
        }
        p.shutdown();
        StringBuilder sb = new StringBuilder("{\"statuses\":{");
        boolean first = true;
        for (Map.Entry<String, Integer> e : statuses.entrySet()) {
            if (!first) sb.append(',');
            first = false;
            sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        sb.append("},\"errors\":").append(strings(errors)).append('}');
        System.out.println("RESULT " + sb);
        return 0;
    }

    static int consume(Map<String, String> o) throws Exception {
        String topic = o.get("topic");
        int expect = Integer.parseInt(o.get("expect"));
        long timeoutMs = (long) (Double.parseDouble(o.getOrDefault("timeout", "40")) * 1000);
        Map<String, AtomicInteger> got = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(o.get("group"));
        c.setNamesrvAddr(o.get("namesrv"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(1000);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.computeIfAbsent(new String(m.getBody(), StandardCharsets.UTF_8), k -> new AtomicInteger())
                    .incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long start = System.currentTimeMillis();
        c.start();
        while (System.currentTimeMillis() - start < timeoutMs && countExpected(got, expect) < expect) {
            Thread.sleep(100);
        }
        long elapsed = System.currentTimeMillis() - start;
        Thread.sleep(3000);  // offsets are persisted every second
        Map<String, Long> offsets = new TreeMap<>();
        Set<MessageQueue> mqs = c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet();
        for (MessageQueue mq : mqs) {
            if (!mq.getTopic().equals(topic)) continue;
            long off = c.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
            offsets.put(mq.getBrokerName() + ":" + mq.getQueueId(), off);
        }
        c.shutdown();
        List<String> missing = new ArrayList<>();
        int duplicates = 0;
        for (int i = 0; i < expect; i++) {
            AtomicInteger n = got.get("sr-" + i);
            if (n == null) missing.add("sr-" + i);
            else duplicates += n.get() - 1;
        }
        StringBuilder sb = new StringBuilder("{");
        sb.append("\"received\":").append(countExpected(got, expect));
        sb.append(",\"distinct\":").append(got.size());
        sb.append(",\"duplicates\":").append(duplicates);
        sb.append(",\"elapsed_ms\":").append(elapsed);
        sb.append(",\"missing_count\":").append(missing.size());
        sb.append(",\"missing\":").append(strings(missing.subList(0, Math.min(20, missing.size()))));
        sb.append(",\"offsets\":{");
        boolean first = true;
        for (Map.Entry<String, Long> e : offsets.entrySet()) {
            if (!first) sb.append(',');
            first = false;
            sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        sb.append("}}");
        System.out.println("RESULT " + sb);
        return 0;
    }

    static int countExpected(Map<String, AtomicInteger> got, int expect) {
        int n = 0;
        for (int i = 0; i < expect; i++) if (got.containsKey("sr-" + i)) n++;
        return n;
    }

    static String strings(List<String> items) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) sb.append(',');
            sb.append('"').append(items.get(i).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        return sb.append(']').toString();
    }
}
