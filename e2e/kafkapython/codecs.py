#!/usr/bin/env python3
"""kafka-python's codecs: it writes 50 keyed records with each of gzip,
snappy (xerial framing), lz4 (frame) and zstd, then reads the whole topic
back, the batches franz-go wrote in the same codecs included.
Usage: codecs.py BOOTSTRAP TOPIC EXPECTED_TOTAL
Prints a JSON report on stdout.
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer

bootstrap, topic, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
report = {"produced": {}, "consumed": {}}
for codec in ("gzip", "snappy", "lz4", "zstd"):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec,
                      linger_ms=5, batch_size=64 * 1024)
    futures = []
    for i in range(50):
        k, v = "py-%s-%02d" % (codec, i), "value-%s-%d" % (codec, i) * 20
        futures.append(p.send(topic, key=k.encode(), value=v.encode()))
        report["produced"][k] = v
    for f in futures:
        f.get(timeout=30)
    p.close()

c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  consumer_timeout_ms=10000)
for m in c:
    report["consumed"][m.key.decode()] = m.value.decode()
    if len(report["consumed"]) == total:
        break
c.close()
print(json.dumps(report))
