// kafkajs partition reassignment against a partlog cluster:
//   node reassign.js BOOTSTRAP TOPIC PARTITION TARGET_CSV
// Starts moving TOPIC/PARTITION to TARGET (AlterPartitionReassignments),
// polls ListPartitionReassignments until the move is done (at most 60 s),
// then tries three refusals, and prints one JSON line:
// {"ms": N, "seen": [{replicas, addingReplicas, removingReplicas}...], "errors": {...}}
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, partition, targetCsv] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "partlog-reassign-test", brokers: bootstrap.split(","), logLevel: logLevel.WARN });

async function errorType(call) {
  try {
    await call();
    return "NONE";
  } catch (e) {
    // Per-partition errors come as a KafkaJSAggregateError of protocol errors.
    const inner = Array.isArray(e.errors) && e.errors.length ? e.errors[0] : e;
    return inner.type || inner.name || String(inner);
  }
}

async function main() {
  const admin = kafka.admin({ retry: { retries: 2 } });
  await admin.connect();
  const p = Number(partition);
  const replicas = targetCsv.split(",").map(Number);
  const started = Date.now();
  await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: p, replicas }] }], timeout: 30000 });
  const seen = [];
  for (;;) {
    const { topics } = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [p] }], timeout: 5000 });
    const parts = topics.flatMap((t) => t.partitions);
    if (parts.length === 0) break;
    seen.push(...parts.map(({ replicas, addingReplicas, removingReplicas }) => ({ replicas, addingReplicas, removingReplicas })));
    if (Date.now() - started > 60000) throw new Error(`still moving after 60 s: ${JSON.stringify(parts)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const ms = Date.now() - started;
  const errors = {
    unregistered: await errorType(() =>
      admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: p, replicas: [9999] }] }] })),
    duplicate: await errorType(() =>
      admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: p, replicas: [replicas[0], replicas[0]] }] }] })),
    unknown_partition: await errorType(() =>
      admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition: 999, replicas }] }] })),
  };
  await admin.disconnect();
  console.log(JSON.stringify({ ms, seen, errors }));
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
