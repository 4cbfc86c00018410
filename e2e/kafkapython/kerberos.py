#!/usr/bin/env python3
"""kafka-python over SASL/GSSAPI (Kerberos) with the ticket kinit left.

kafka-python 2.0 authenticates with SaslHandshake v0 and raw GSS-API tokens
(python-gssapi over MIT's library): the AP-REQ, the AP-REP, an empty token,
the broker's security layer offer and its wrapped answer.
Usage: kerberos.py SASL_PLAINTEXT_ADDR TOPIC
Prints a JSON report on stdout. (Not named gssapi.py: this directory is
first on sys.path, and kafka-python imports the module gssapi.)
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer

addr, topic = sys.argv[1:3]
kw = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
          sasl_kerberos_service_name="kafka")

report = {"produced": [], "consumed": []}
p = KafkaProducer(bootstrap_servers=addr, acks="all", **kw)
for i in range(20):
    v = "kerberized-%d" % i
    p.send(topic, key=str(i).encode(), value=v.encode()).get(timeout=30)
    report["produced"].append(v)
p.close()

c = KafkaConsumer(topic, bootstrap_servers=addr, auto_offset_reset="earliest",
                  consumer_timeout_ms=10000, **kw)
for m in c:
    report["consumed"].append(m.value.decode())
    if len(report["consumed"]) == len(report["produced"]):
        break
c.close()
print(json.dumps(report))
