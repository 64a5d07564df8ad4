// kafkajs produces records with headers to a topic and reads them back in a consumer group;
// prints one JSON line: {"sent": n, "read": [{"value", "headers"}...]} or {"error": "..."}
const { Kafka, logLevel } = require("kafkajs");
const [brokers, topic, count, withHeaders] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "tidelog-test", brokers: brokers.split(","), logLevel: logLevel.NOTHING });
async function main() {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const messages = [];
  for (let n = 0; n < Number(count); n++) {
    messages.push({ value: `kafkajs-${n}`, headers: withHeaders === "1" ? { trace: `t-${n}` } : undefined });
  }
  try {
    await producer.send({ topic, acks: -1, messages });
  } catch (error) {
    console.log(JSON.stringify({ error: error.type || error.name, message: error.message }));
    await producer.disconnect();
    return;
  }
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `g-${topic}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const read = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${count}`)), 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        const headers = {};
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v.toString();
        read.push({ value: message.value.toString(), headers });
        if (read.length >= Number(count)) { clearTimeout(timer); resolve(); }
      },
    });
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ sent: Number(count), read }));
}
main().catch((error) => { console.log(JSON.stringify({ error: error.name, message: error.message })); process.exit(1); });
