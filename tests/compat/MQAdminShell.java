/*
 * Runs Apache RocketMQ's mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup) many times in
 * one JVM, so that a test module pays for one JVM start instead of one per command. Compiled by
 * tests/compat/mqadmin.py against the rocketmq-tools jars of each version (4.9.x and 5.x).
 *
 * Protocol (one request per stdin line, fields separated by TAB):
 *   <mqadmin sub-command> <arg> <arg> ...   runs MQAdminStartup.main0(args, null)
 *   @produce <group> <topic> <count> <tag> <prefix>   a DefaultMQProducer of <group> (kept running
 *                                           until @stop) sends <count> messages, body and key
 *                                           "<prefix>-<i>"; prints one "SENT ..." line per message
 *   @produce-traced ...                     the same with a producer that has message tracing on
 *                                           (trace records go to RMQ_SYS_TRACE_TOPIC)
 *   @consume <group> <topic>                starts a DefaultMQPushConsumer (from the first offset)
 *                                           that records what it receives; prints "CLIENT <clientId>"
 *   @received <group>                       prints "MSG <topic> <queueId> <queueOffset> <msgId> <body>"
 *                                           for each message received so far (all of them, in order)
 *   @stop <group>                           shuts down that group's producer or consumer
 *   @help                                   mqadmin without arguments (the list of sub-commands)
 * After the output of each request comes a line "\u0001END <status>", status "ok", "exit <code>"
 * (the command called System.exit) or "exception <text>".
 */

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class MQAdminShell {
    static final class ExitTrap extends SecurityException {
        final int status;

        ExitTrap(int status) {
            super("exit " + status);
            this.status = status;
        }
    }

    static final Map<String, DefaultMQProducer> PRODUCERS = new HashMap<>();
    static final Map<String, DefaultMQPushConsumer> CONSUMERS = new HashMap<>();
    static final Map<String, List<String>> RECEIVED = new HashMap<>();

    @SuppressWarnings("removal")
    public static void main(String[] argv) throws Exception {
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkPermission(Permission perm) {
            }

            @Override
            public void checkExit(int status) {
                throw new ExitTrap(status);
            }
        });
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        String namesrv = argv.length > 0 ? argv[0] : "";
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        realOut.println("\u0001READY");
        realOut.flush();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] args = line.split("\t", -1);
            ByteArrayOutputStream buf = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(buf, true, "UTF-8");
            String status = "ok";
            System.setOut(capture);
            System.setErr(capture);
            try {
                if (args[0].equals("@help")) {
                    MQAdminStartup.main0(new String[0], null);
                } else if (args[0].startsWith("@")) {
                    client(args, namesrv, capture);
                } else {
                    MQAdminStartup.main0(args, null);
                }
            } catch (ExitTrap e) {
                status = "exit " + e.status;
            } catch (Throwable e) {
                e.printStackTrace(capture);
                status = "exception " + e;
            } finally {
                capture.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            realOut.print(buf.toString("UTF-8"));
            realOut.println();
            realOut.println("\u0001END " + status.replace('\n', ' '));
            realOut.flush();
        }
        // End of input: stop at once; the servers see the connections close.
        Runtime.getRuntime().halt(0);
    }

    static void client(String[] args, String namesrv, PrintStream out) throws Exception {
        switch (args[0]) {
            case "@produce":
            case "@produce-traced": {
                String group = args[1];
                DefaultMQProducer producer = PRODUCERS.get(group);
                if (producer == null) {
                    producer = new DefaultMQProducer(group, null, args[0].equals("@produce-traced"), null);
                    producer.setNamesrvAddr(namesrv);
                    producer.setInstanceName(group);
                    producer.setSendMsgTimeout(10000);
                    producer.start();
                    PRODUCERS.put(group, producer);
                }
                int count = Integer.parseInt(args[3]);
                for (int i = 0; i < count; i++) {
                    String text = args[5] + "-" + i;
                    Message msg = new Message(args[2], args[4], text, text.getBytes(StandardCharsets.UTF_8));
                    SendResult r = producer.send(msg);
                    out.printf("SENT %s %s %s %s %d %d%n", r.getSendStatus(), r.getMsgId(), r.getOffsetMsgId(),
                        r.getMessageQueue().getBrokerName(), r.getMessageQueue().getQueueId(), r.getQueueOffset());
                }
                // The first heartbeat went out before the client knew any broker; send one now, so
                // that the brokers list this producer at once instead of after up to 30 s.
                producer.getDefaultMQProducerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
                break;
            }
            case "@consume": {
                String group = args[1];
                final List<String> received = Collections.synchronizedList(new ArrayList<>());
                RECEIVED.put(group, received);
                DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
                consumer.setNamesrvAddr(namesrv);
                consumer.setInstanceName(group);
                consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                consumer.setPersistConsumerOffsetInterval(1000);
                consumer.subscribe(args[2], "*");
                consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                    for (MessageExt m : msgs) {
                        received.add(String.format("MSG %s %d %d %s %s", m.getTopic(), m.getQueueId(),
                            m.getQueueOffset(), m.getMsgId(), new String(m.getBody(), StandardCharsets.UTF_8)));
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                consumer.start();
                CONSUMERS.put(group, consumer);
                out.printf("CLIENT %s%n", consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId());
                break;
            }
            case "@received": {
                List<String> received = RECEIVED.get(args[1]);
                if (received != null) {
                    synchronized (received) {
                        for (String m : received) {
                            out.println(m);
                        }
                    }
                }
                break;
            }
            case "@stop": {
                DefaultMQProducer producer = PRODUCERS.remove(args[1]);
                if (producer != null) {
                    producer.shutdown();
                }
                DefaultMQPushConsumer consumer = CONSUMERS.remove(args[1]);
                if (consumer != null) {
                    consumer.shutdown();
                }
                break;
            }
            default:
                out.println("unknown shell request " + args[0]);
        }
    }
}
