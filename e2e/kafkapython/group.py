#!/usr/bin/env python3
"""Three kafka-python consumers of one group, started together on a topic of
six partitions: each gets a share of the partitions in one rebalance (its
JoinGroup v2, SyncGroup and heartbeat thread) and together they read every
record; the assignment they end with covers each partition once.
Usage: group.py BOOTSTRAP TOPIC GROUP TOTAL
Prints a JSON report on stdout.
"""
import json
import sys
import threading
import time

from kafka import KafkaConsumer

bootstrap, topic, group, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lock = threading.Lock()
seen = {}
assignments = {}
errors = []
stop = threading.Event()


def member(i):
    try:
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=True, auto_commit_interval_ms=200, session_timeout_ms=10000,
                          heartbeat_interval_ms=500, max_poll_interval_ms=30000)
        deadline = time.time() + 60
        while time.time() < deadline:
            batch = c.poll(timeout_ms=200)
            with lock:
                for tp, msgs in batch.items():
                    for m in msgs:
                        seen.setdefault(m.key.decode(), []).append(i)
                assignments[i] = sorted(tp.partition for tp in c.assignment())
                done = len(seen) >= total and sum(len(a) for a in assignments.values()) == 6 and len(assignments) == 3
            if done:
                stop.set()
            if stop.is_set():
                break
        c.commit()
        # Close only when all are done, so no rebalance follows a member's
        # departure before the others have reported.
        stop.wait(60)
        c.close()
    except Exception as e:  # reported, not raised
        with lock:
            errors.append("%s: %r" % (i, e))
        stop.set()


threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print(json.dumps({"seen": len(seen), "duplicates": sum(1 for v in seen.values() if len(v) > 1),
                  "assignments": assignments, "errors": errors}))
