#!/usr/bin/python3
"""Exactly-once consume-transform-produce with confluent-kafka-python (librdkafka).

Run by e2e/compat_confluent_test.go as
    eos.py BOOTSTRAP PREFIX N
with Debian's python3-confluent-kafka. It creates PREFIX-in and PREFIX-out
(3 partitions each), writes N keyed records to PREFIX-in with an idempotent
producer, aborts one transaction of decoy records to PREFIX-out, then copies
every input record, transformed, to PREFIX-out in transactions that also
commit the consumer group's offsets (send_offsets_to_transaction), as
librdkafka's EOS applications do. Finally it checks zombie fencing (a second
producer with the same transactional.id fences the first) and reads
PREFIX-out back with a read_committed consumer. The report is one JSON
object on stdout; the Go test checks it and the logs themselves.
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def main():
    bootstrap, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t_in, t_out, group = prefix + "-in", prefix + "-out", prefix + "-eos"
    deadline = time.monotonic() + 90
    report = {"librdkafka": list(__import__("confluent_kafka").libversion())}

    # Admin: create both topics, describe the input's configs.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(t, num_partitions=3, replication_factor=1) for t in (t_in, t_out)],
                               operation_timeout=30)
    for t, f in futs.items():
        f.result()
    cfg = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t_in)])
    for res, f in cfg.items():
        entries = f.result()
        report["cleanupPolicy"] = entries["cleanup.policy"].value
    md = admin.list_topics(timeout=30)
    report["partitions"] = {t: len(md.topics[t].partitions) for t in (t_in, t_out)}

    # Idempotent producer writes the input.
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    def on_delivery(err, msg):
        if err is not None:
            raise KafkaException(err)
        acked.append(msg.key().decode())
    for i in range(n):
        p.produce(t_in, key="%s-k-%04d" % (prefix, i), value="v-%d" % i, headers=[("h", str(i).encode())],
                  on_delivery=on_delivery)
        p.poll(0)
    if p.flush(60) != 0:
        raise SystemExit("input not flushed")
    report["produced"] = len(acked)

    # Transactional producer: one aborted transaction of decoys first.
    txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": prefix + "-txn", "linger.ms": 5})
    txp.init_transactions(60)
    txp.begin_transaction()
    for i in range(20):
        txp.produce(t_out, key="%s-aborted-%d" % (prefix, i), value="never visible")
    txp.flush(60)
    txp.abort_transaction(60)

    # Consume-transform-produce, offsets committed inside each transaction.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([t_in])
    copied, txns = 0, 0
    while copied < n:
        if time.monotonic() > deadline:
            raise SystemExit("copied %d of %d before the deadline" % (copied, n))
        msgs = c.consume(num_messages=50, timeout=1.0)
        msgs = [m for m in msgs if m.error() is None or m.error().code() != KafkaError._PARTITION_EOF]
        for m in msgs:
            if m.error() is not None:
                raise KafkaException(m.error())
        if not msgs:
            continue
        txp.begin_transaction()
        nxt = {}
        for m in msgs:
            hdr = dict(m.headers() or [])
            txp.produce(t_out, key=m.key(), value=m.value().decode().upper() + "|" + hdr["h"].decode())
            nxt[m.partition()] = m.offset() + 1
        txp.send_offsets_to_transaction([TopicPartition(t_in, part, off) for part, off in nxt.items()],
                                        c.consumer_group_metadata(), 60)
        txp.commit_transaction(60)
        copied += len(msgs)
        txns += 1
    report["copied"], report["transactions"] = copied, txns
    committed = c.committed([TopicPartition(t_in, i) for i in range(3)], timeout=30)
    report["committed"] = {str(tp.partition): tp.offset for tp in committed}
    c.close()

    # Zombie fencing: a new producer with the same transactional.id fences txp.
    txp2 = Producer({"bootstrap.servers": bootstrap, "transactional.id": prefix + "-txn"})
    txp2.init_transactions(60)
    fenced = None
    try:
        txp.begin_transaction()
        txp.produce(t_out, key=prefix + "-zombie", value="zombie")
        txp.flush(30)
        txp.commit_transaction(30)
    except KafkaException as e:
        err = e.args[0]
        fenced = {"name": err.name(), "fatal": err.fatal()}
    report["fenced"] = fenced

    # Read the output back, read_committed.
    rc = Consumer({"bootstrap.servers": bootstrap, "group.id": prefix + "-reader", "auto.offset.reset": "earliest",
                   "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True})
    rc.subscribe([t_out])
    out, eofs = [], set()
    while len(eofs) < 3 or len(out) < n:
        if time.monotonic() > deadline:
            raise SystemExit("read %d of %d output records before the deadline" % (len(out), n))
        m = rc.poll(1.0)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == KafkaError._PARTITION_EOF:
                eofs.add(m.partition())
                continue
            raise KafkaException(m.error())
        out.append({"p": m.partition(), "o": m.offset(), "k": m.key().decode(), "v": m.value().decode()})
    rc.close()
    report["out"] = out
    print(json.dumps(report))


if __name__ == "__main__":
    main()
