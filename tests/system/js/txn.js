// kafkajs transactions against a partlog cluster: node txn.js BOOTSTRAP TOPIC
// Commits one transaction (records and a group's offsets), aborts another,
// then reads the topic with readUncommitted false and true and prints one
// JSON line: {"committed": [...values...], "uncommitted": [...], "offset": N}.
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "partlog-txn-test", brokers: bootstrap.split(","), logLevel: logLevel.WARN });

async function readAll(readUncommitted, expected) {
  const consumer = kafka.consumer({ groupId: `read-${Date.now()}-${readUncommitted}`, readUncommitted });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const values = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, 20000);
    consumer
      .run({
        eachMessage: async ({ message }) => {
          values.push(message.value.toString());
          if (values.length >= expected) {
            clearTimeout(timer);
            setTimeout(resolve, 1000); // anything beyond what we expect arrives too
          }
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  return values;
}

async function main() {
  const producer = kafka.producer({ transactionalId: "kafkajs-txn", idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  let txn = await producer.transaction();
  await txn.send({ topic, messages: [0, 1, 2, 3].map((i) => ({ value: `kjs-commit-${i}`, partition: i % 2 })) });
  await txn.sendOffsets({ consumerGroupId: "kafkajs-ctp", topics: [{ topic, partitions: [{ partition: 0, offset: "7" }] }] });
  await txn.commit();
  txn = await producer.transaction();
  await txn.send({ topic, messages: [0, 1, 2].map((i) => ({ value: `kjs-abort-${i}`, partition: i % 2 })) });
  await txn.abort();
  await producer.disconnect();

  const committed = await readAll(false, 4);
  const uncommitted = await readAll(true, 7);
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchOffsets({ groupId: "kafkajs-ctp", topics: [topic] });
  await admin.disconnect();
  const p0 = offsets[0].partitions.find((p) => p.partition === 0);
  console.log(JSON.stringify({ committed, uncommitted, offset: Number(p0.offset) }));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e && e.stack ? e.stack : e);
    process.exit(1);
  },
);
