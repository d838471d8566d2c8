// Apache RocketMQ's Java client for the pull-answer compat tests (tests/compat/test_slave_read.py,
// test_pull_answers.py; compiled by bench/compare/java.py's ensure_driver against the client jars).
// Two commands, each printing one line "RESULT {json}" at the end:
//
//   produce namesrv=H:P topic=T (count=N [prefix=sr-] [tag=TagA] | runs=prefix:tag:count,...) [group=G]
//       sync sends of bodies "<prefix><i>" with that tag, run after run; counts send statuses.
//   consume namesrv=H:P topic=T expect=N group=G [prefix=sr-] [expression=*] [timeout=SECONDS]
//       a DefaultMQPushConsumer of group G (CONSUME_FROM_FIRST_OFFSET, offsets persisted every second)
//       subscribed with the expression, until it has every body "<prefix>0" .. "<prefix><N-1>" or the
//       timeout; then it waits 3 s, prints the offsets it holds in memory per queue, shuts down
//       (persisting them) and reports what it got (bodies without the prefix count as "unexpected").
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

public class PullCheck {
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
                System.err.println("usage: PullCheck produce|consume key=value ...");
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
        // runs=prefix:tag:count,... (in order), else one run of count=N bodies prefix<i> with tag
        String runs = o.getOrDefault("runs",
            o.getOrDefault("prefix", "sr-") + ":" + o.getOrDefault("tag", "TagA") + ":" + o.get("count"));
        Map<String, Integer> statuses = new TreeMap<>();
        List<String> errors = new ArrayList<>();
        for (String run : runs.split(",")) {
            String[] parts = run.split(":");
            int count = Integer.parseInt(parts[2]);
            for (int i = 0; i < count; i++) {
                Message m = new Message(o.get("topic"), parts[1], (parts[0] + i).getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = p.send(m);
                    statuses.merge(r.getSendStatus().name(), 1, Integer::sum);
                } catch (Exception e) {
                    statuses.merge("EXCEPTION", 1, Integer::sum);
                    if (errors.size() < 5) errors.add(e.toString());
                }
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
        String prefix = o.getOrDefault("prefix", "sr-");
        int expect = Integer.parseInt(o.get("expect"));
        long timeoutMs = (long) (Double.parseDouble(o.getOrDefault("timeout", "40")) * 1000);
        Map<String, AtomicInteger> got = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(o.get("group"));
        c.setNamesrvAddr(o.get("namesrv"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(1000);
        c.subscribe(topic, o.getOrDefault("expression", "*"));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.computeIfAbsent(new String(m.getBody(), StandardCharsets.UTF_8), k -> new AtomicInteger())
                    .incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long start = System.currentTimeMillis();
        c.start();
        while (System.currentTimeMillis() - start < timeoutMs && countExpected(got, prefix, expect) < expect) {
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
            AtomicInteger n = got.get(prefix + i);
            if (n == null) missing.add(prefix + i);
            else duplicates += n.get() - 1;
        }
        StringBuilder sb = new StringBuilder("{");
        int received = countExpected(got, prefix, expect);
        sb.append("\"received\":").append(received);
        sb.append(",\"distinct\":").append(got.size());
        sb.append(",\"unexpected\":").append(got.size() - received);
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

    static int countExpected(Map<String, AtomicInteger> got, String prefix, int expect) {
        int n = 0;
        for (int i = 0; i < expect; i++) if (got.containsKey(prefix + i)) n++;
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
