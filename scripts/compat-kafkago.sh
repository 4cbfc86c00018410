#!/usr/bin/env bash
# segmentio/kafka-go's own package tests against a Sediment broker built from
# this tree. kafka-go is our go.mod's version, tested straight from the module
# cache (`go test -c` of a dependency's package); nothing of it is copied into
# the repository.
#
# kafka-go's tests dial a broker at localhost:9092 (hard-coded, as in its
# docker-compose.yml), so the broker listens on 127.0.0.1:9092 and advertises
# localhost:9092 (some tests check the host name); the script stops if
# something already listens on 9092.
#
#   KAFKA_VERSION=3.7.0  what kafka-go's tests take the broker for (their
#                        KafkaIsAtLeast gates); 3.7.0 is the newest version of
#                        kafka-go's CI. Below 3.0.0 four transaction tests run
#                        that kafka-go skips from 3.0.0 on.
#   NETTEST=1            run TestConn/nettest (kafka-go's CI sets
#                        KAFKA_SKIP_NETTEST; so does this script by default)
#   COMPAT_PORT=29500    the broker's Raft address; its metrics use +1
#   BROKER_LOG_LEVEL     the broker's --log-level (default warn)
#   BROKER_FLAGS         more flags for the broker (e.g. "--log-flush os")
#   RUN, SKIP            -test.run / -test.skip patterns (SKIP adds to the
#                        skips below)
#   TEST_TIMEOUT         -test.timeout per package (default 15m)
#   KEEP=1               keep the scratch folder (logs, data) even on success
set -euo pipefail
. "$(dirname "$0")/compat-count.sh"
GO=${GO:-go}
PORT=${COMPAT_PORT:-29500}
RUN=${RUN:-.}
TEST_TIMEOUT=${TEST_TIMEOUT:-15m}
export KAFKA_VERSION=${KAFKA_VERSION:-3.7.0}
if [ "${NETTEST:-0}" != 1 ]; then
	export KAFKA_SKIP_NETTEST=1
fi

# Skipped by default (why: docs/compatibility.md, "kafka-go's own tests"):
# tests that fail whatever the broker:
#   TestReaderConsumerGroup/verify_offset_committed*, .../consumer_group_commits_on_close:
#     the test's getOffsets calls ConsumerGroup.coordinator on a config that
#     never went through Validate (nil connect func): a nil-pointer panic
#     that ends the whole test binary;
#   TestReaderConsumerGroup/consumer_group_rebalance: 24 records over 3
#     partitions, each of two readers must read 12; the reader with one
#     partition has 8, so it passes only when that reader fetched records
#     before the rebalance and kafka-go hands them out afterwards.
skip_default='^TestReaderConsumerGroup$/^(verify_offset_committed.*|consumer_group_commits_on_close|consumer_group_rebalance)$'
SKIP_PATTERN=${SKIP_DEFAULT-$skip_default}
if [ -n "${SKIP:-}" ]; then
	SKIP_PATTERN="${SKIP_PATTERN:+$SKIP_PATTERN|}$SKIP"
fi

for port in 9092 9093; do
	if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
		echo "compat-kafkago: something already listens on 127.0.0.1:$port (kafka-go's tests need that port); stop it first" >&2
		exit 1
	fi
done

work=$(mktemp -d /tmp/sediment-compat-kafkago.XXXXXX)
pid=""
tests=""
stop() {
	[ -z "$tests" ] || kill "$tests" 2>/dev/null || true
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
}
trap stop EXIT

# The packages whose tests talk to a broker; kafka-go's other packages
# (protocol/..., compress/snappy, testing) are encoding unit tests.
pkgs=(. compress topics sasl)

echo "compat-kafkago: building sediment and kafka-go's tests in $work" >&2
$GO build -o "$work/sediment" ./cmd/sediment
for p in "${pkgs[@]}"; do
	$GO test -c -o "$work/$(basename "$p" | sed 's/^\.$/kafka/').test" "github.com/segmentio/kafka-go/$p"
done
kgdir=$($GO list -m -f '{{.Dir}}' github.com/segmentio/kafka-go)
kgver=$($GO list -m -f '{{.Version}}' github.com/segmentio/kafka-go)

# As kafka-go's docker-compose.yml: auto-created topics, message.max.bytes
# 200000000, node id 1, a SASL_PLAINTEXT listener on 9093 (its SASL tests)
# with the users made below, an authorizer that allows everyone when a
# resource has no ACL (its ACL tests); ANONYMOUS, the PLAINTEXT principal,
# is a super user, for the broker's own inter-broker requests.
"$work/sediment" broker --node-id 1 \
	--listeners PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093 \
	--advertised-listeners PLAINTEXT://localhost:9092,SASL_PLAINTEXT://localhost:9093 \
	--raft-address "127.0.0.1:$PORT" --admin-address "127.0.0.1:$((PORT + 1))" \
	--data-dir "$work/broker" \
	--message-max-bytes 200000000 \
	--group-initial-rebalance-delay 0s \
	--authorizer-enabled --allow-everyone-if-no-acl-found --super-users User:ANONYMOUS \
	--log-level "${BROKER_LOG_LEVEL:-warn}" ${BROKER_FLAGS:-} >> "$work/broker.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 60))
until "$work/sediment" cluster status -b 127.0.0.1:9092 --timeout 5s 2>/dev/null | grep -q ' active '; do
	if [ $SECONDS -ge $deadline ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "compat-kafkago: the broker did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done

# kafka-go's docker-compose users (KAFKA_OPTS / kafka-configs there).
user() { "$work/sediment" user set -b 127.0.0.1:9092 "$@" >/dev/null; }
user adminplain --password admin-secret
user adminscram --password admin-secret-256 --mechanism SCRAM-SHA-256
user adminscram --password admin-secret-512 --mechanism SCRAM-SHA-512
user adminscram256 --password admin-secret-256 --mechanism SCRAM-SHA-256
user adminscram512 --password admin-secret-512 --mechanism SCRAM-SHA-512

echo "compat-kafkago: kafka-go $kgver tests, KAFKA_VERSION=$KAFKA_VERSION RUN=$RUN SKIP=$SKIP_PATTERN" >&2
rc=0
for p in "${pkgs[@]}"; do
	bin="$work/$(basename "$p" | sed 's/^\.$/kafka/').test"
	echo "=== package github.com/segmentio/kafka-go/$p" >> "$work/kafkago.log"
	(cd "$kgdir/$p" && exec "$bin" -test.v -test.run "$RUN" ${SKIP_PATTERN:+-test.skip "$SKIP_PATTERN"} -test.timeout "$TEST_TIMEOUT") >> "$work/kafkago.log" 2>&1 &
	tests=$!
	wait "$tests" || rc=$?
	tests=""
done
grep -E '^(=== package|--- (FAIL|SKIP))' "$work/kafkago.log" || true
count_tests "$work/kafkago.log"
if ! kill -0 "$pid" 2>/dev/null; then
	echo "compat-kafkago: the broker died during the run" >&2
	fail=$((fail + 1))
fi
echo "kafka-go $kgver (KAFKA_VERSION=$KAFKA_VERSION) against a Sediment broker: $pass passed, $fail failed, $skip skipped (top-level tests; -test.skip'd ones not counted)"
status=0
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
	status=1
fi
if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
	echo "compat-kafkago: logs (kafkago.log, broker.log) kept in $work" >&2
	exit "$status"
fi
stop
rm -rf "$work"
