#!/usr/bin/python3
"""kafka-python (the pure-Python client, Debian's python3-kafka) against a broker.

Run by e2e/compat_kafkapython_test.go as
    clients.py BOOTSTRAP PREFIX N
with Debian's /usr/bin/python3. kafka-python implements the protocol itself
(no librdkafka), negotiates its own API versions and guesses the broker's
version from ApiVersions. The script:
  - creates PREFIX-t (3 partitions, retention.ms and cleanup.policy set) with
    KafkaAdminClient, creates it again (TOPIC_ALREADY_EXISTS expected), tries
    an invalid name, and reads the topic's configs back;
  - writes N keyed records with headers, the first half gzip-compressed with
    acks=all, the second half uncompressed with acks=1, with kafka-python's
    default (murmur2) partitioner, and keeps each record's partition and offset;
  - reads them all with a consumer group member, commits, closes; a second
    member of the same group then finds nothing left (it resumes at the
    committed offsets);
  - asks beginning/end offsets and offsets_for_times, and reads partition 0
    again with a manually assigned consumer;
  - lists and describes the group and its committed offsets, and deletes a
    scratch topic.
The report is one JSON object on stdout; the Go test checks it and the log
itself with franz-go.
"""
import json
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def main():
    bootstrap, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    topic, group, scratch = prefix + "-t", prefix + "-g", prefix + "-scratch"
    report = {"kafka_python": kafka.__version__}

    adm = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=prefix + "-admin")
    report["api_version"] = list(adm.config["api_version"])
    adm.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                topic_configs={"retention.ms": "86400000", "cleanup.policy": "delete"}),
                       NewTopic(scratch, num_partitions=1, replication_factor=1)])
    try:
        adm.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        report["already_exists"] = False
    except TopicAlreadyExistsError:
        report["already_exists"] = True
    try:
        adm.create_topics([NewTopic("bad/name", num_partitions=1, replication_factor=1)])
        report["invalid_topic"] = False
    except InvalidTopicError:
        report["invalid_topic"] = True
    res = adm.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    configs = {}
    for resp in res:
        for _, _, _, _, entries in resp.resources:
            for e in entries:
                configs[e[0]] = e[1]
    report["configs"] = {k: configs.get(k) for k in ("retention.ms", "cleanup.policy")}

    produced = []
    for codec, acks, rng in (("gzip", "all", range(0, n // 2)), (None, 1, range(n // 2, n))):
        p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=codec,
                          linger_ms=5, client_id=prefix + "-producer")
        futs = []
        for i in rng:
            k, v = "%s-k-%04d" % (prefix, i), "v-%d" % i
            futs.append((k, v, p.send(topic, key=k.encode(), value=v.encode(),
                                      headers=[("i", str(i).encode())])))
        p.flush()
        for k, v, f in futs:
            md = f.get(timeout=30)
            produced.append({"p": md.partition, "o": md.offset, "k": k, "v": v})
        p.close()
    report["produced"] = produced

    def member():
        return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=prefix + "-member",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000)

    c = member()
    consumed, deadline = [], time.time() + 60
    while len(consumed) < n and time.time() < deadline:
        for m in c:
            consumed.append({"p": m.partition, "o": m.offset, "k": m.key.decode(), "v": m.value.decode(),
                             "h": [[hk, hv.decode()] for hk, hv in m.headers]})
            if len(consumed) == n:
                break
    c.commit()
    report["committed"] = {str(tp.partition): c.committed(tp) for tp in sorted(c.assignment())}
    c.close()
    report["consumed"] = consumed

    # The same group: once assigned, the member resumes at the committed
    # offsets and finds nothing left.
    c = member()
    second, deadline = 0, time.time() + 30
    while not c.assignment() and time.time() < deadline:
        second += sum(len(v) for v in c.poll(timeout_ms=200).values())
    second += sum(len(v) for v in c.poll(timeout_ms=1000).values())
    report["second_member"] = second
    report["second_positions"] = {str(tp.partition): c.position(tp) for tp in sorted(c.assignment())}
    c.close()

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=prefix + "-assigned",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [TopicPartition(topic, i) for i in range(3)]
    report["beginning"] = {str(tp.partition): o for tp, o in c.beginning_offsets(tps).items()}
    report["end"] = {str(tp.partition): o for tp, o in c.end_offsets(tps).items()}
    future = int(time.time() * 1000) + 3600 * 1000
    times = c.offsets_for_times({tp: 0 for tp in tps} | {TopicPartition(scratch, 0): future})
    report["offsets_for_times"] = {"%s-%d" % (tp.topic, tp.partition): (None if o is None else o.offset)
                                   for tp, o in times.items()}
    c.assign([tps[0]])
    c.seek_to_beginning(tps[0])
    report["reread_p0"] = [m.offset for m in c]
    c.close()

    report["groups"] = [g[0] for g in adm.list_consumer_groups() if g[0] == group]
    report["group_offsets"] = {str(tp.partition): om.offset
                               for tp, om in adm.list_consumer_group_offsets(group).items() if tp.topic == topic}
    report["group_state"] = adm.describe_consumer_groups([group])[0].state
    adm.delete_topics([scratch])
    report["topics_after_delete"] = sorted(t for t in adm.list_topics() if t.startswith(prefix))
    adm.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
