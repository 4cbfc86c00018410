#!/usr/bin/env python3
"""kafka-python over SASL: PLAIN and SCRAM on SASL_PLAINTEXT, SCRAM over TLS.

kafka-python 2.0 authenticates with SaslHandshake v0 and raw SASL tokens.
Usage: sasl.py SASL_PLAINTEXT_ADDR SASL_SSL_ADDR CA_FILE TOPIC USER PASSWORD
Prints a JSON report on stdout.
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer

plain_addr, ssl_addr, cafile, topic, user, password = sys.argv[1:7]

runs = [
    ("SASL_PLAINTEXT", "PLAIN", plain_addr),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", plain_addr),
    ("SASL_SSL", "SCRAM-SHA-512", ssl_addr),
]


def security(proto, mech, pw):
    kw = dict(security_protocol=proto, sasl_mechanism=mech,
              sasl_plain_username=user, sasl_plain_password=pw)
    if proto == "SASL_SSL":
        kw.update(ssl_cafile=cafile, ssl_check_hostname=False)
    return kw


report = {"produced": [], "consumed": {}, "wrong_password": None}
for proto, mech, addr in runs:
    p = KafkaProducer(bootstrap_servers=addr, acks="all", **security(proto, mech, password))
    for i in range(10):
        v = "%s-%s-%d" % (proto, mech, i)
        p.send(topic, value=v.encode()).get(timeout=30)
        report["produced"].append(v)
    p.close()

for proto, mech, addr in runs:
    c = KafkaConsumer(topic, bootstrap_servers=addr, auto_offset_reset="earliest",
                      consumer_timeout_ms=5000, **security(proto, mech, password))
    got = []
    for m in c:
        got.append(m.value.decode())
        if len(got) == 10 * len(runs):
            break
    c.close()
    report["consumed"]["%s/%s" % (proto, mech)] = got

try:
    c = KafkaConsumer(bootstrap_servers=plain_addr, request_timeout_ms=6000,
                      api_version_auto_timeout_ms=5000,
                      **security("SASL_PLAINTEXT", "SCRAM-SHA-256", "wrong"))
    c.topics()
    report["wrong_password"] = "accepted"
except Exception as e:  # the class name is the report
    report["wrong_password"] = type(e).__name__

print(json.dumps(report))
