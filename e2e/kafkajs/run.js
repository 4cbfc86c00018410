// Drives kafkajs against one broker; run by e2e/compat_kafkajs_test.go.
//
//   node run.js BROKER TOPIC GROUP N
//
// Creates TOPIC (3 partitions), starts two consumers in GROUP, and once both
// hold partitions produces N keyed records "js-k-i" -> "v-i" with an
// idempotent producer (half uncompressed, half gzip); the consumers commit.
// Then it fetches the group's offsets, runs admin APIs (configs, partitions,
// delete records, groups, topics) and prints one JSON object on stdout:
// {produced, consumed: [{member, partition, offset, key, value, header}],
// offsets, ends, groups, describedGroup, admin}. Any error exits non-zero.
'use strict';
const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel } = require('kafkajs');

const [broker, topic, group, nArg] = process.argv.slice(2);
const n = Number(nArg);
if (!broker || !topic || !group || !(n > 0)) {
  console.error('usage: node run.js BROKER TOPIC GROUP N');
  process.exit(2);
}

async function main() {
  const kafka = new Kafka({
    clientId: 'sediment-e2e-kafkajs',
    brokers: [broker],
    logLevel: logLevel.ERROR,
    retry: { retries: 8, initialRetryTime: 100 },
  });
  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
  if (!created) throw new Error('createTopics returned false (topic exists?)');
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  if (md.topics.length !== 1 || md.topics[0].partitions.length !== 3) {
    throw new Error('metadata: ' + JSON.stringify(md));
  }

  // Two group members first; records are produced once both hold
  // partitions (the group is stable), so each is consumed exactly once.
  const consumed = [];
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  const joined = [false, false];
  let resolveJoined;
  const bothJoined = new Promise((r) => { resolveJoined = r; });
  const consumers = [];
  for (let i = 0; i < 2; i++) {
    const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 });
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      const parts = e.payload.memberAssignment[topic] || [];
      if (parts.length > 0) joined[i] = true;
      if (joined[0] && joined[1]) resolveJoined();
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: true,
      autoCommitInterval: 100,
      eachMessage: async ({ partition, message }) => {
        const h = message.headers.h ? message.headers.h.toString() : null;
        consumed.push({ member: i, partition, offset: message.offset, key: message.key.toString(), value: message.value.toString(), header: h });
        if (consumed.length >= n) resolveDone();
      },
    });
    consumers.push(consumer);
  }
  const timer = setTimeout(() => {
    console.error(`kafkajs: deadline: joined ${joined}, consumed ${consumed.length} of ${n}`);
    process.exit(1);
  }, 60000);
  await bothJoined;

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const half = Math.floor(n / 2);
  const msgs = [];
  for (let i = 0; i < n; i++) {
    msgs.push({ key: `js-k-${i}`, value: `v-${i}`, headers: { h: `x${i}` } });
  }
  await producer.send({ topic, acks: -1, messages: msgs.slice(0, half) });
  await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: msgs.slice(half) });
  await producer.disconnect();

  await done;
  clearTimeout(timer);
  for (const c of consumers) await c.disconnect(); // commits what was consumed

  const offsets = await admin.fetchOffsets({ groupId: group, topics: [topic] });
  const listed = await admin.fetchTopicOffsets(topic);
  const groups = await admin.listGroups();
  const described = await admin.describeGroups([group]);

  // Transactions (kafkajs has no KIP-447: TxnOffsetCommit v1): commit 20
  // records and an offset for GROUP-txn, abort 10, on TOPIC-txn.
  const txnTopic = topic + '-txn';
  await admin.createTopics({ topics: [{ topic: txnTopic, numPartitions: 2 }] });
  const tp = kafka.producer({ idempotent: true, maxInFlightRequests: 1, transactionalId: 'kafkajs-txn-producer' });
  await tp.connect();
  const t1 = await tp.transaction();
  const txnMsgs = (prefix, count) => Array.from({ length: count }, (_, i) => ({ key: `${prefix}-${i}`, value: `tv-${i}` }));
  await t1.send({ topic: txnTopic, messages: txnMsgs('js-txn-c', 20) });
  await t1.sendOffsets({ consumerGroupId: group + '-txn', topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }] });
  await t1.commit();
  const t2 = await tp.transaction();
  await t2.send({ topic: txnTopic, messages: txnMsgs('js-txn-a', 10) });
  await t2.abort();
  await tp.disconnect();

  // Admin APIs at kafkajs's versions, on a topic of their own.
  const other = topic + '-admin';
  await admin.createTopics({ topics: [{ topic: other, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] }] });
  const cfg = async () => {
    const r = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: other }], includeSynonyms: false });
    const e = r.resources[0].configEntries.find((c) => c.configName === 'retention.ms');
    return e ? e.configValue : null;
  };
  const retentionBefore = await cfg();
  await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: other, configEntries: [{ name: 'retention.ms', value: '86400000' }] }] });
  const retentionAfter = await cfg();
  await admin.createPartitions({ topicPartitions: [{ topic: other, count: 4 }] });
  const otherMd = await admin.fetchTopicMetadata({ topics: [other] });
  const p = kafka.producer();
  await p.connect();
  await p.send({ topic: other, messages: [{ key: 'a', value: '1', partition: 0 }, { key: 'b', value: '2', partition: 0 }, { key: 'c', value: '3', partition: 0 }] });
  await p.disconnect();
  await admin.deleteTopicRecords({ topic: other, partitions: [{ partition: 0, offset: '2' }] });
  const afterDelete = await admin.fetchTopicOffsets(other);
  const p0 = afterDelete.find((x) => x.partition === 0);
  await admin.deleteGroups([group]);
  const groupsAfter = await admin.listGroups();
  await admin.deleteTopics({ topics: [other] });
  const topicsAfter = await admin.listTopics();
  await admin.disconnect();
  process.stdout.write(JSON.stringify({
    produced: n,
    consumed,
    offsets: offsets[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) })),
    ends: listed.map((p) => ({ partition: p.partition, offset: Number(p.high) })),
    groups: groups.groups.map((g) => g.groupId),
    describedGroup: { state: described.groups[0].state, protocolType: described.groups[0].protocolType, errorCode: described.groups[0].errorCode },
    admin: {
      retentionBefore, retentionAfter,
      partitionsAfterCreate: otherMd.topics[0].partitions.length,
      p0Low: Number(p0.low), p0High: Number(p0.high),
      groupsAfterDelete: groupsAfter.groups.map((g) => g.groupId),
      otherListedAfterDelete: topicsAfter.includes(other),
    },
  }) + '\n');
}

main().catch((e) => {
  console.error('kafkajs:', e && e.stack ? e.stack : e);
  process.exit(1);
});
