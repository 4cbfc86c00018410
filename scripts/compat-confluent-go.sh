#!/usr/bin/env bash
# confluentinc/confluent-kafka-go's own tests (package kafka: its integration
# suite TestIntegration and the other tests that talk to a broker, through
# the librdkafka it bundles) against a Sediment broker built from this tree.
# confluent-kafka-go is not in our go.mod: the script makes a scratch module
# in a temporary folder, fetches CONFLUENT_GO_VERSION through the Go module
# proxy and builds the package's tests there (cgo; about 7 minutes of the
# first build on 2 cores, cached afterwards). Nothing of it is copied into
# the repository.
#
# Then scripts/compat-confluent-go/kip848.go.txt, built in the same scratch
# module, checks librdkafka's KIP-848 consumer (group.protocol=consumer),
# which the suite does not cover (skipped when RUN is set).
#
# Its tests read the broker list from ./testconf.json: the script writes one
# (Brokers 127.0.0.1:COMPAT_PORT, BrokersSasl the same broker's
# SASL_PLAINTEXT listener on COMPAT_PORT+3, PLAIN as testuser) and runs the test binary
# from the scratch folder. The broker is set up as the kafka/testresources
# docker-compose's Kafka: node id 0, num.partitions 4, rack RACK1,
# auto-creation on; with the authorizer (TestAdminACLs), the PLAINTEXT
# clients' User:ANONYMOUS a super user, everyone allowed where no ACL is.
#
#   CONFLUENT_GO_VERSION=v2.11.1
#   COMPAT_PORT=29540    the broker's Kafka port; Raft +1, metrics +2, SASL_PLAINTEXT +3
#   BROKER_LOG_LEVEL     the broker's --log-level (default warn)
#   BROKER_FLAGS         more flags for the broker (e.g. "--log-flush os")
#   RUN, SKIP            -test.run / -test.skip patterns (SKIP adds to the
#                        skips below)
#   TEST_TIMEOUT         -test.timeout (default 20m)
#   KEEP=1               keep the scratch folder (logs, data) even on success
set -euo pipefail
. "$(dirname "$0")/compat-count.sh"
GO=${GO:-go}
VERSION=${CONFLUENT_GO_VERSION:-v2.11.1}
PORT=${COMPAT_PORT:-29540}
RUN=${RUN:-.}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}

# Skipped by default (why: docs/compatibility.md, "confluent-kafka-go's
# own tests"):
#   TestTransactionalProducer: fails whatever the broker's speed allows:
#     its Flush(-1) returns at once with the messages still in flight
#     (Producer.Flush computes a deadline from the negative timeout), so it
#     passes only when the transaction's produce requests were acknowledged
#     before SendOffsetsToTransaction returned.
skip_default='^TestTransactionalProducer$'
SKIP_PATTERN=${SKIP_DEFAULT-$skip_default}
if [ -n "${SKIP:-}" ]; then
	SKIP_PATTERN="${SKIP_PATTERN:+$SKIP_PATTERN|}$SKIP"
fi

for p in "$PORT" $((PORT + 1)) $((PORT + 2)) $((PORT + 3)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "compat-confluent-go: something already listens on 127.0.0.1:$p; choose another COMPAT_PORT" >&2
		exit 1
	fi
done

repo=$(pwd)
work=$(mktemp -d /tmp/sediment-compat-confluent-go.XXXXXX)
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

echo "compat-confluent-go: building sediment and confluent-kafka-go $VERSION's tests in $work" >&2
$GO build -o "$work/sediment" ./cmd/sediment
(
	cd "$work"
	$GO mod init compat-confluent-go > /dev/null 2>&1
	$GO get -t "github.com/confluentinc/confluent-kafka-go/v2/kafka@$VERSION" > /dev/null 2>&1
	$GO test -c -o "$work/kafka.test" github.com/confluentinc/confluent-kafka-go/v2/kafka
	mkdir kip848
	cp "$repo/scripts/compat-confluent-go/kip848.go.txt" kip848/main.go
	$GO build -o "$work/kip848.bin" ./kip848
)
cat > "$work/testconf.json" <<EOF
{"Brokers": "127.0.0.1:$PORT", "BrokersSasl": "127.0.0.1:$((PORT + 3))", "SaslUsername": "testuser", "SaslPassword": "testpass", "SaslMechanism": "PLAIN", "TopicName": "test", "GroupID": "testgroup", "PerfMsgCount": 10000, "PerfMsgSize": 100, "Config": ["api.version.request=true"]}
EOF

"$work/sediment" broker --node-id 0 \
	--listeners "PLAINTEXT://127.0.0.1:$PORT,SASL_PLAINTEXT://127.0.0.1:$((PORT + 3))" \
	--raft-address "127.0.0.1:$((PORT + 1))" --admin-address "127.0.0.1:$((PORT + 2))" \
	--data-dir "$work/broker" \
	--num-partitions 4 --broker-rack RACK1 \
	--authorizer-enabled --super-users User:ANONYMOUS --allow-everyone-if-no-acl-found \
	--log-level "${BROKER_LOG_LEVEL:-warn}" ${BROKER_FLAGS:-} >> "$work/broker.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 60))
until "$work/sediment" cluster status -b "127.0.0.1:$PORT" --timeout 5s 2>/dev/null | grep -q ' active '; do
	if [ $SECONDS -ge $deadline ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "compat-confluent-go: the broker did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done

# The SASL broker of the tests that need one (BrokersSasl): PLAIN as
# testuser, not a super user; as in the suite's docker-compose, a resource
# without ACLs is open to everyone (the authorized-operations tests expect
# all operations, then only those their ACLs grant).
"$work/sediment" user set testuser --password testpass -b "127.0.0.1:$PORT" > /dev/null
echo "compat-confluent-go: confluent-kafka-go $VERSION tests, RUN=$RUN SKIP=$SKIP_PATTERN" >&2
rc=0
(cd "$work" && exec "$work/kafka.test" -test.v -test.run "$RUN" ${SKIP_PATTERN:+-test.skip "$SKIP_PATTERN"} -test.timeout "$TEST_TIMEOUT") > "$work/kafka.log" 2>&1 &
tests=$!
wait "$tests" || rc=$?
tests=""
grep -E '^ *--- (FAIL|SKIP)' "$work/kafka.log" || true
count_tests "$work/kafka.log"
ipass=$(grep -c '^    --- PASS: TestIntegration/' "$work/kafka.log" || true)
ifail=$(grep -c '^    --- FAIL: TestIntegration/' "$work/kafka.log" || true)
iskip=$(grep -c '^    --- SKIP: TestIntegration/' "$work/kafka.log" || true)
# librdkafka's KIP-848 consumer, which the suite does not cover
# (scripts/compat-confluent-go/kip848.go.txt).
kip=0
if [ -z "${RUN:-}" ] || [ "$RUN" = . ]; then
	"$work/sediment" topic create kip848 -p 6 -b "127.0.0.1:$PORT" > /dev/null
	"$work/kip848.bin" "127.0.0.1:$PORT" kip848 kip848-group 600 || kip=1
fi
if ! kill -0 "$pid" 2>/dev/null; then
	echo "compat-confluent-go: the broker died during the run" >&2
	fail=$((fail + 1))
fi
echo "confluent-kafka-go $VERSION against a Sediment broker: $pass passed, $fail failed, $skip skipped (top-level tests; -test.skip'd ones not counted); TestIntegration's suite: $ipass passed, $ifail failed, $iskip skipped"
cd "$repo"
status=0
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ] || [ "$kip" -ne 0 ]; then
	status=1
fi
if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
	echo "compat-confluent-go: logs (kafka.log, broker.log) kept in $work" >&2
	exit "$status"
fi
stop
rm -rf "$work"
