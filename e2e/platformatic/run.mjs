// @platformatic/kafka (a pure JavaScript client for Kafka 3.5 to 4.1, with
// the KIP-848 consumer group protocol and transactions) against a broker.
//
// Run by e2e/compat_platformatic_test.go as
//     node run.mjs BOOTSTRAP PREFIX N
// It creates PREFIX-in and PREFIX-out (3 partitions each), writes N keyed
// records with a header to PREFIX-in with an idempotent producer (batches
// rotating through none, gzip, snappy and lz4), reads them with a classic
// group member and with a KIP-848 (groupProtocol "consumer") member, each
// committing, then copies every record, transformed, to PREFIX-out in
// transactions that also commit the offsets of a group reading PREFIX-in
// read_committed; one transaction of decoys is aborted. Then it reads
// PREFIX-out back read_committed, lists the groups, and makes admin calls
// on a scratch topic (configs, partitions, records, offsets, groups, log
// dirs). The report is one JSON object on stdout; the Go test checks it
// and the logs themselves.
import { Admin, Consumer, Producer, stringDeserializers, stringSerializers } from '@platformatic/kafka'

const [bootstrap, prefix, nArg] = process.argv.slice(2)
const n = Number(nArg)
const bootstrapBrokers = [bootstrap]
const tIn = `${prefix}-in`
const tOut = `${prefix}-out`
const classicGroup = `${prefix}-classic`
const eosGroup = `${prefix}-eos`
const modernGroup = `${prefix}-modern`
const READ_COMMITTED = 1
const log = (...args) => console.error(new Date().toISOString(), ...args)
const report = {}

const admin = new Admin({ clientId: `${prefix}-admin`, bootstrapBrokers })
await admin.createTopics({
  topics: [tIn, tOut],
  partitions: 3,
  replicas: 1,
  configs: [{ name: 'cleanup.policy', value: 'delete' }]
})
try {
  await admin.createTopics({ topics: [tIn], partitions: 3, replicas: 1 })
  report.alreadyExists = ''
} catch (err) {
  report.alreadyExists = (err.errors ?? [err]).map(e => e.apiId ?? e.message).join(',')
}
report.topics = (await admin.listTopics()).filter(t => t.startsWith(prefix)).sort()

// Idempotent produce, one send a batch, codecs in turn.
const producer = new Producer({
  clientId: `${prefix}-producer`, bootstrapBrokers, serializers: stringSerializers, idempotent: true
})
const codecs = ['none', 'gzip', 'snappy', 'lz4']
const batch = 50
for (let i = 0, b = 0; i < n; i += batch, b++) {
  const messages = []
  for (let j = i; j < Math.min(n, i + batch); j++) {
    const k = `${prefix}-k-${String(j).padStart(4, '0')}`
    messages.push({ topic: tIn, key: k, value: `v-${j}`, headers: new Map([['i', String(j)]]) })
  }
  await producer.send({ messages, compression: codecs[b % codecs.length], acks: -1 })
}
await producer.close()
log('produced', n)

// A classic group member reads everything and commits.
async function consumeAll (consumer, topic, want, options = {}) {
  const out = []
  const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: false, maxWaitTime: 500, ...options })
  const deadline = setTimeout(() => stream.close(), 60000)
  for await (const m of stream) {
    out.push({
      p: m.partition,
      o: Number(m.offset),
      k: m.key,
      v: m.value,
      h: [...m.headers.entries()].map(([hk, hv]) => [String(hk), String(hv)])
    })
    await m.commit()
    if (out.length >= want) break
  }
  clearTimeout(deadline)
  await stream.close()
  return out
}
const classic = new Consumer({
  groupId: classicGroup, clientId: `${prefix}-classic`, bootstrapBrokers, deserializers: stringDeserializers
})
report.classic = await consumeAll(classic, tIn, n)
await classic.close()
log('classic group read', report.classic.length)

// The same with a KIP-848 member (ConsumerGroupHeartbeat; its commits are
// OffsetCommit v9+ with the member epoch).
const modern = new Consumer({
  groupId: modernGroup, clientId: `${prefix}-modern`, bootstrapBrokers, deserializers: stringDeserializers, groupProtocol: 'consumer'
})
report.modern = await consumeAll(modern, tIn, n)
await modern.close()
log('consumer-protocol group read', report.modern.length)

// Exactly-once copy: a KIP-848 group member, read_committed, and a
// transactional producer that commits the group's offsets in each
// transaction.
const txProducer = new Producer({
  clientId: `${prefix}-tx`, bootstrapBrokers, serializers: stringSerializers, idempotent: true, transactionalId: `${prefix}-txid`
})
const decoy = await txProducer.beginTransaction()
await decoy.send({ messages: [...Array(20).keys()].map(i => ({ topic: tOut, key: `${prefix}-aborted-${i}`, value: 'decoy' })) })
await decoy.abort()

// A classic member: @platformatic/kafka 1.35.0 sends a consumer-protocol
// member's transactional commits with generation 0 instead of its member
// epoch, which Kafka refuses too (the broker answers ILLEGAL_GENERATION).
const eos = new Consumer({
  groupId: eosGroup, clientId: `${prefix}-eos`, bootstrapBrokers, deserializers: stringDeserializers
})
const stream = await eos.consume({ topics: [tIn], mode: 'committed', fallbackMode: 'earliest', autocommit: false, isolationLevel: READ_COMMITTED, maxWaitTime: 500 })
let copied = 0
let transactions = 0
let pending = []
const deadline = setTimeout(() => stream.close(), 90000)
async function flush () {
  const tx = await txProducer.beginTransaction()
  await tx.send({ messages: pending.map(m => ({ topic: tOut, key: m.key, value: `V-${m.value.slice(2)}|${m.headers.get('i')}` })) })
  await tx.addConsumer(eos)
  for (const m of pending) await tx.addOffset(m)
  await tx.commit()
  transactions++
  copied += pending.length
  pending = []
}
for await (const m of stream) {
  pending.push(m)
  if (pending.length === batch || copied + pending.length === n) await flush()
  if (copied === n) break
}
clearTimeout(deadline)
await stream.close()
report.copied = copied
report.transactions = transactions
await eos.close()
await txProducer.close()
log('copied', copied, 'in', transactions, 'transactions')

const reader = new Consumer({
  groupId: `${prefix}-reader`, clientId: `${prefix}-reader`, bootstrapBrokers, deserializers: stringDeserializers
})
report.out = await consumeAll(reader, tOut, n, { isolationLevel: READ_COMMITTED })
await reader.close()

const groups = await admin.listGroups({ types: ['classic', 'consumer'] })
report.groups = {}
for (const g of [classicGroup, modernGroup, eosGroup]) {
  const info = groups.get(g)
  report.groups[g] = info ? { state: info.state, type: info.groupType ?? '' } : null
}
report.offsets = {}
for (const g of await admin.listConsumerGroupOffsets({ groups: [classicGroup, modernGroup, eosGroup] })) {
  report.offsets[g.groupId] = JSON.parse(JSON.stringify(g, (k, v) => typeof v === 'bigint' ? Number(v) : v))
}
// Admin calls at the client's versions, on a scratch topic.
const tAdm = `${prefix}-admin`
const big = v => typeof v === 'bigint' ? v.toString() : v
const adm = {}
await admin.createTopics({ topics: [tAdm], partitions: 2, replicas: 1 })
const p2 = new Producer({ clientId: `${prefix}-admin-producer`, bootstrapBrokers, serializers: stringSerializers })
await p2.send({ messages: [...Array(10).keys()].map(i => ({ topic: tAdm, key: `a${i}`, value: `a${i}`, partition: i % 2 })) })
await p2.close()
const TOPIC = 2
await admin.incrementalAlterConfigs({ resources: [{ resourceType: TOPIC, resourceName: tAdm, configs: [{ name: 'retention.ms', configOperation: 0, value: '3600000' }] }] })
const configsOf = async () => {
  const described = await admin.describeConfigs({ resources: [{ resourceType: TOPIC, resourceName: tAdm, configurationKeys: ['retention.ms', 'cleanup.policy'] }], includeSynonyms: true })
  return Object.fromEntries(described[0].configs.map(c => [c.name, { value: c.value, source: c.configSource }]))
}
adm.afterIncremental = await configsOf()
// AlterConfigs replaces the topic's whole set: retention.ms goes back to
// its default.
await admin.alterConfigs({ resources: [{ resourceType: TOPIC, resourceName: tAdm, configs: [{ name: 'cleanup.policy', value: 'compact' }] }] })
adm.afterAlter = await configsOf()
await admin.createPartitions({ topics: [{ name: tAdm, count: 3, assignments: [] }] })
await admin.deleteRecords({ topics: [{ name: tAdm, partitions: [{ partition: 0, offset: 2n }] }] })
const listed = await admin.listOffsets({ topics: [{ name: tAdm, partitions: [{ partitionIndex: 0, timestamp: -2n }, { partitionIndex: 1, timestamp: -1n }, { partitionIndex: 2, timestamp: -1n }] }] })
adm.offsets = Object.fromEntries(listed[0].partitions.map(p => [p.partitionIndex, Number(p.offset)]))
const g = `${prefix}-admin-group`
await admin.alterConsumerGroupOffsets({ groupId: g, topics: [{ name: tAdm, partitionOffsets: [{ partition: 0, offset: 3n }, { partition: 1, offset: 1n }] }] })
await admin.deleteConsumerGroupOffsets({ groupId: g, topics: [{ name: tAdm, partitionIndexes: [1] }] })
adm.groupOffsets = {}
for (const gr of await admin.listConsumerGroupOffsets({ groups: [g] })) {
  for (const t of gr.topics ?? []) for (const p of t.partitions) adm.groupOffsets[p.partitionIndex] = Number(p.committedOffset)
}
const dg = await admin.describeGroups({ groups: [g] })
adm.groupState = dg.get(g)?.state ?? null
const dirs = await admin.describeLogDirs({ topics: [{ name: tAdm, partitions: [0, 1] }] })
adm.logDirPartitions = dirs.flatMap(d => d.results.flatMap(r => r.topics.flatMap(t => t.partitions.map(p => p.partitionIndex)))).sort()
await admin.deleteGroups({ groups: [g] })
await admin.deleteTopics({ topics: [tAdm] })
adm.topicsAfter = (await admin.listTopics()).filter(t => t === tAdm)
report.admin = JSON.parse(JSON.stringify(adm, (k, v) => big(v)))

await admin.close()
console.log(JSON.stringify(report))
