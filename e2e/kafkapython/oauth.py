#!/usr/bin/env python3
"""kafka-python over SASL/OAUTHBEARER with unsecured (alg none) tokens.

kafka-python 2.0 sends the client's first message on SaslHandshake v0 as a
raw token and takes an empty token back as success.
Usage: oauth.py SASL_PLAINTEXT_ADDR TOPIC
Prints a JSON report on stdout.
"""
import base64
import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.oauth.abstract import AbstractTokenProvider

addr, topic = sys.argv[1:3]


def b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


class Unsecured(AbstractTokenProvider):
    def __init__(self, sub, exp):
        self.sub, self.exp = sub, exp

    def token(self):
        now = int(time.time())
        return "%s.%s." % (b64({"alg": "none"}), b64({"sub": self.sub, "iat": now - 60, "exp": now + self.exp}))


def kw(sub, exp=3600):
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=Unsecured(sub, exp))


report = {"produced": [], "consumed": [], "expired": None}
p = KafkaProducer(bootstrap_servers=addr, acks="all", **kw("alice"))
for i in range(10):
    v = "oauth-%d" % i
    p.send(topic, value=v.encode()).get(timeout=30)
    report["produced"].append(v)
p.close()

c = KafkaConsumer(topic, bootstrap_servers=addr, auto_offset_reset="earliest",
                  consumer_timeout_ms=10000, **kw("alice"))
for m in c:
    report["consumed"].append(m.value.decode())
    if len(report["consumed"]) == len(report["produced"]):
        break
c.close()

try:
    c = KafkaConsumer(bootstrap_servers=addr, request_timeout_ms=6000,
                      api_version_auto_timeout_ms=5000, **kw("alice", exp=-30))
    c.topics()
    report["expired"] = "accepted"
except Exception as e:  # the class name is the report
    report["expired"] = type(e).__name__
print(json.dumps(report))
