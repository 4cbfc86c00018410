#!/usr/bin/env bash
# IBM/sarama's own functional tests (build tag `functional`) against five
# Sediment brokers built from this tree, each behind a toxiproxy proxy, as
# sarama's docker-compose.yml sets up Kafka. sarama is our go.mod's version,
# tested straight from the module cache (`go test -c -tags functional` of a
# dependency's package); toxiproxy's server is built from the module cache
# too (go.mod's github.com/Shopify/toxiproxy/v2). Nothing of either is copied
# into the repository.
#
# sarama's tests are given an existing environment (TOXIPROXY_ADDR,
# KAFKA_VERSION): they create the proxies kafka1..kafka5 listening on
# 127.0.0.1:29091-29095 if missing; this script creates them first, pointing
# at the brokers' own listeners. Broker N advertises localhost:2909N (the
# proxy, as LISTENER_LOCAL in the compose file) and reaches its peers
# directly (--peer-addresses, as LISTENER_INTERNAL), so a toxic cuts clients
# off, not replication. Ports 29091-29095 are fixed by sarama's tests; the
# script stops if one is taken.
#
# A few tests stop and start a broker with `docker compose stop|start
# kafka-N`: a `docker` shim on PATH does that to the Sediment broker
# (SIGTERM, then the same command line again); `docker compose logs --since
# T kafka-N` prints broker N's log lines from T on. Tests that run Kafka's
# own tools in the containers (`docker compose exec`) skip themselves in an
# existing environment.
#
#   KAFKA_VERSION=4.3.1  what the tests take the brokers for (checkKafkaVersion);
#                        sarama's docker-compose default
#   COMPAT_PORT=29600    brokers listen on +1..+5, Raft +101..+105,
#                        metrics +201..+205, toxiproxy's API on +0
#   BROKER_LOG_LEVEL     the brokers' --log-level (default warn)
#   BROKER_FLAGS         more flags for every broker (e.g. "--log-flush os")
#   RUN, SKIP            -test.run / -test.skip patterns (default RUN: every
#                        test of sarama's functional_*_test.go; SKIP adds to
#                        the skips below)
#   TEST_TIMEOUT         -test.timeout (default 20m)
#   KEEP=1               keep the scratch folder (logs, data) even on success
#   DEBUG=true           sarama's own debug log (to sarama.log)
set -euo pipefail
. "$(dirname "$0")/compat-count.sh"
GO=${GO:-go}
BROKERS=5
PORT=${COMPAT_PORT:-29600}
RUN=${RUN:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}
export KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}

# Skipped by default (why: docs/compatibility.md, "sarama's functional
# tests"): nothing now; SKIP_DEFAULT=<pattern> sets a list of its own.
skip_default=''
SKIP_PATTERN=${SKIP_DEFAULT-$skip_default}
if [ -n "${SKIP:-}" ]; then
	SKIP_PATTERN="${SKIP_PATTERN:+$SKIP_PATTERN|}$SKIP"
fi

for p in $(seq 29091 29095) "$PORT"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "compat-sarama: something already listens on 127.0.0.1:$p (sarama's tests use 29091-29095); stop it first" >&2
		exit 1
	fi
done

work=$(mktemp -d /tmp/sediment-compat-sarama.XXXXXX)
tests=""
toxi=""
stop() {
	[ -z "$tests" ] || kill "$tests" 2>/dev/null || true
	for n in $(seq 1 "$BROKERS"); do
		[ -f "$work/broker$n.pid" ] && kill -TERM "$(cat "$work/broker$n.pid")" 2>/dev/null || true
	done
	for n in $(seq 1 "$BROKERS"); do
		if [ -f "$work/broker$n.pid" ]; then
			p=$(cat "$work/broker$n.pid")
			for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		fi
	done
	[ -z "$toxi" ] || kill "$toxi" 2>/dev/null || true
}
trap stop EXIT

echo "compat-sarama: building sediment, toxiproxy and sarama's functional tests in $work" >&2
$GO build -o "$work/sediment" ./cmd/sediment
$GO build -o "$work/toxiproxy-server" github.com/Shopify/toxiproxy/v2/cmd/server
$GO test -c -tags functional -o "$work/sarama.test" github.com/IBM/sarama
sdir=$($GO list -m -f '{{.Dir}}' github.com/IBM/sarama)
sver=$($GO list -m -f '{{.Version}}' github.com/IBM/sarama)
if [ -z "$RUN" ]; then
	# The functional tests only: those of sarama's functional_*_test.go
	# (the package's unit tests, run with mock brokers, are left out).
	RUN="^($(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing.T).*/\1/p' "$sdir"/functional_*_test.go | paste -sd'|'))\$"
fi

voters=""
peers=""
seeds=""
for n in $(seq 1 "$BROKERS"); do
	voters+="${voters:+,}$n@127.0.0.1:$((PORT + 100 + n))"
	peers+="${peers:+,}localhost:$((29090 + n))=127.0.0.1:$((PORT + n))"
	seeds+="${seeds:+,}127.0.0.1:$((PORT + n))"
done

# start-broker N: broker N in the background, its pid in brokerN.pid. As
# sarama's docker-compose.yml: rack N, default.replication.factor 2,
# auto.create.topics.enable false, group.initial.rebalance.delay.ms 0.
cat > "$work/start-broker" <<EOF
#!/usr/bin/env bash
n=\$1
nohup "$work/sediment" broker --node-id "\$n" \\
	--listeners "127.0.0.1:\$(($PORT + n))" \\
	--advertised-listeners "localhost:\$((29090 + n))" \\
	--peer-addresses "$peers" \\
	--raft-address "127.0.0.1:\$(($PORT + 100 + n))" \\
	--admin-address "127.0.0.1:\$(($PORT + 200 + n))" \\
	--voters "$voters" \\
	--data-dir "$work/broker\$n" \\
	--broker-rack "\$n" \\
	--default-replication-factor 2 \\
	--auto-create-topics-enable=false \\
	--group-initial-rebalance-delay 0s \\
	--log-level "${BROKER_LOG_LEVEL:-warn}" ${BROKER_FLAGS:-} >> "$work/broker\$n.log" 2>&1 < /dev/null &
echo \$! > "$work/broker\$n.pid"
EOF
# The docker shim: `docker compose [--profile P] stop|start kafka-N`.
mkdir -p "$work/bin"
cat > "$work/bin/docker" <<EOF
#!/usr/bin/env bash
args=()
while [ \$# -gt 0 ]; do
	case \$1 in
	compose) ;;
	--profile) shift ;;
	*) args+=("\$1") ;;
	esac
	shift
done
echo "\$(date -u +%H:%M:%S.%N) docker shim: \${args[*]}" >> "$work/docker.log"
case "\${args[0]:-}:\${args[1]:-}" in
stop:kafka-[1-5])
	n=\${args[1]#kafka-}
	p=\$(cat "$work/broker\$n.pid")
	kill -TERM "\$p" 2>/dev/null || true
	for _ in \$(seq 1 300); do kill -0 "\$p" 2>/dev/null || exit 0; sleep 0.1; done
	echo "docker shim: broker \$n did not stop" >&2; exit 1 ;;
start:kafka-[1-5])
	n=\${args[1]#kafka-}
	if kill -0 "\$(cat "$work/broker\$n.pid")" 2>/dev/null; then exit 0; fi
	"$work/start-broker" "\$n" ;;
logs:--since)
	# logs --since 2006-01-02T15:04:05Z kafka-N (RFC 3339 times compare as strings)
	since=\${args[2]%Z}
	n=\${args[3]#kafka-}
	awk -v s="time=\$since" 'substr(\$1, 1, length(s)) >= s' "$work/broker\$n.log" ;;
*)
	echo "docker shim: not supported against Sediment: \${args[*]}" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/start-broker" "$work/bin/docker"

LOG_LEVEL=${TOXIPROXY_LOG_LEVEL:-info} "$work/toxiproxy-server" -host 127.0.0.1 -port "$PORT" > "$work/toxiproxy.log" 2>&1 &
toxi=$!
for n in $(seq 1 "$BROKERS"); do
	"$work/start-broker" "$n"
done
toxiapi="http://127.0.0.1:$PORT"
deadline=$((SECONDS + 60))
until curl -sf "$toxiapi/version" > /dev/null; do
	if [ $SECONDS -ge $deadline ]; then
		echo "compat-sarama: toxiproxy did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.2
done
for n in $(seq 1 "$BROKERS"); do
	curl -sf -X POST "$toxiapi/proxies" -d "{\"name\":\"kafka$n\",\"listen\":\"127.0.0.1:$((29090 + n))\",\"upstream\":\"127.0.0.1:$((PORT + n))\",\"enabled\":true}" > /dev/null
done
# Ready when every broker is active in the metadata.
deadline=$((SECONDS + 90))
until [ "$("$work/sediment" cluster status -b "$seeds" --timeout 5s 2>/dev/null | grep -c ' active ')" -eq "$BROKERS" ]; do
	if [ $SECONDS -ge $deadline ]; then
		echo "compat-sarama: the brokers did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done

echo "compat-sarama: sarama $sver functional tests, KAFKA_VERSION=$KAFKA_VERSION TOXIPROXY_ADDR=$toxiapi RUN=$RUN SKIP=$SKIP_PATTERN" >&2
rc=0
(cd "$sdir" && exec env PATH="$work/bin:$PATH" TOXIPROXY_ADDR="$toxiapi" "$work/sarama.test" -test.v -test.run "$RUN" ${SKIP_PATTERN:+-test.skip "$SKIP_PATTERN"} -test.timeout "$TEST_TIMEOUT") > "$work/sarama.log" 2>&1 &
tests=$!
wait "$tests" || rc=$?
tests=""
grep -E '^--- (FAIL|SKIP)' "$work/sarama.log" || true
count_tests "$work/sarama.log"
for n in $(seq 1 "$BROKERS"); do
	if ! kill -0 "$(cat "$work/broker$n.pid")" 2>/dev/null; then
		echo "compat-sarama: broker $n is not running at the end of the run" >&2
		fail=$((fail + 1))
	fi
done
echo "sarama $sver functional tests (KAFKA_VERSION=$KAFKA_VERSION) against $BROKERS Sediment brokers behind toxiproxy: $pass passed, $fail failed, $skip skipped (top-level tests; -test.skip'd ones not counted)"
status=0
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
	status=1
fi
if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
	echo "compat-sarama: logs (sarama.log, broker*.log, docker.log) kept in $work" >&2
	exit "$status"
fi
stop
rm -rf "$work"
