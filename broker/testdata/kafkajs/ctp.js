// A consume-transform-produce stage with kafkajs, run by
// TestKafkajsTransactions: transactional id, idempotent producer,
// maxInFlightRequests 1, a read_committed consumer with autoCommit off, and
// the consumed offsets sent in each transaction (TxnOffsetCommit v1, as
// kafkajs has no KIP-447). One transaction is aborted on purpose first.
//
//   node ctp.js BROKER COUNT
const { Kafka, logLevel } = require('kafkajs')

const [broker, countArg] = process.argv.slice(2)
const count = parseInt(countArg, 10)
const kafka = new Kafka({ clientId: 'sediment-kafkajs', brokers: [broker], logLevel: logLevel.ERROR })

async function main () {
  const producer = kafka.producer({ transactionalId: 'kjs-ctp', idempotent: true, maxInFlightRequests: 1 })
  const consumer = kafka.consumer({ groupId: 'kjs-group', readUncommitted: false })
  await producer.connect()
  await consumer.connect()

  const aborted = await producer.transaction()
  await aborted.send({ topic: 'kout', messages: [{ value: 'aborted', partition: 0 }] })
  await aborted.abort()

  consumer.on(consumer.events.CRASH, e => {
    console.error('consumer crashed', e.payload.error)
    process.exit(1)
  })
  await consumer.subscribe({ topic: 'kin', fromBeginning: true })
  let copied = 0
  let finish
  const finished = new Promise(resolve => { finish = resolve })
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      if (batch.messages.length === 0) return
      const txn = await producer.transaction()
      try {
        await txn.send({
          topic: 'kout',
          messages: batch.messages.map(m => ({ key: m.key, value: m.value, partition: batch.partition }))
        })
        const last = batch.messages[batch.messages.length - 1].offset
        await txn.sendOffsets({
          consumerGroupId: 'kjs-group',
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(last) + 1n).toString() }] }]
        })
        await txn.commit()
      } catch (e) {
        await txn.abort()
        throw e
      }
      copied += batch.messages.length
      if (copied >= count) finish()
    }
  })
  await finished
  await consumer.disconnect()
  await producer.disconnect()
}

main().then(() => process.exit(0), e => { console.error(e); process.exit(1) })
