#!/usr/bin/env python3
"""kafka-python's admin client on what clients.py leaves out: ACLs
(create, describe with a filter, delete), create_partitions and
alter_configs (AlterConfigs v0/v1), delete_consumer_groups.
Usage: admin.py BOOTSTRAP TOPIC GROUP
Prints a JSON report on stdout.
"""
import json
import sys

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ConfigResource,
                         ConfigResourceType, NewPartitions, ResourcePattern, ResourcePatternFilter,
                         ResourceType, ACLResourcePatternType)

bootstrap, topic, group = sys.argv[1:4]
a = KafkaAdminClient(bootstrap_servers=bootstrap)
report = {}

acl = ACL(principal="User:bob", host="*", operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW,
          resource_pattern=ResourcePattern(ResourceType.TOPIC, topic))
created = a.create_acls([acl])
report["created"] = len(created["succeeded"])
report["create_failed"] = [str(e) for _, e in created["failed"]]
flt = ACLFilter(principal="User:bob", host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
acls, err = a.describe_acls(flt)
report["described"] = [[x.principal, x.operation.name, x.permission_type.name, x.resource_pattern.resource_name] for x in acls]
deleted = a.delete_acls([flt])
report["deleted"] = sum(len(ok) for _, ok, _ in deleted)
acls, err = a.describe_acls(flt)
report["after_delete"] = len(acls)

a.create_partitions({topic: NewPartitions(total_count=4)})
report["partitions"] = len(a.describe_topics([topic])[0]["partitions"])

a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})])
res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
report["retention_ms"] = {c[0]: c[1] for c in res[0].resources[0][4]}.get("retention.ms")

c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  consumer_timeout_ms=3000)
for _ in c:
    pass
c.commit()
c.close()
report["offsets_before"] = len(a.list_consumer_group_offsets(group))
report["group_deleted"] = [[g, getattr(e, "__name__", type(e).__name__)] for g, e in a.delete_consumer_groups([group])]
report["groups_after"] = [g for g, _ in a.list_consumer_groups()]
a.close()
print(json.dumps(report))
