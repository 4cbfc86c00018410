// @platformatic/kafka's SASL (SaslHandshake v1, SaslAuthenticate v2, its own
// SCRAM): a producer per mechanism writes five records; OAUTHBEARER with an
// unsigned token. A wrong SCRAM password must fail.
// Run by e2e/compat_platformatic_test.go as
//     node sasl.mjs SASL_PLAINTEXT_ADDR TOPIC USER PASSWORD
import { Producer, stringSerializers } from '@platformatic/kafka'

const [addr, topic, username, password] = process.argv.slice(2)
const b64 = o => Buffer.from(JSON.stringify(o)).toString('base64url')
const now = Math.floor(Date.now() / 1000)
const token = `${b64({ alg: 'none' })}.${b64({ sub: username, iat: now - 60, exp: now + 3600 })}.`
const report = { produced: [], wrongPassword: '' }
for (const sasl of [
  { mechanism: 'PLAIN', username, password },
  { mechanism: 'SCRAM-SHA-256', username, password },
  { mechanism: 'SCRAM-SHA-512', username, password },
  { mechanism: 'OAUTHBEARER', token }
]) {
  const p = new Producer({ clientId: 'plt-sasl', bootstrapBrokers: [addr], serializers: stringSerializers, sasl, retries: 0 })
  const messages = []
  for (let i = 0; i < 5; i++) {
    const k = `${sasl.mechanism}-${i}`
    messages.push({ topic, key: k, value: `v-${k}` })
    report.produced.push(k)
  }
  await p.send({ messages, acks: -1 })
  await p.close()
}
try {
  const p = new Producer({
    clientId: 'plt-sasl', bootstrapBrokers: [addr], serializers: stringSerializers, retries: 0,
    sasl: { mechanism: 'SCRAM-SHA-512', username, password: 'wrong' }
  })
  await p.send({ messages: [{ topic, key: 'x', value: 'x' }], acks: -1 })
  await p.close()
  report.wrongPassword = 'accepted'
} catch (err) {
  report.wrongPassword = err.constructor.name + ': ' + (err.message ?? '')
}
console.log(JSON.stringify(report))
process.exit(0)
