#!/usr/bin/env bash
# kafkajs's own test suite (its jest specs: src/**/*.spec.js, unit and
# integration tests) against three Sediment brokers built from this tree, set
# up as kafkajs's docker-compose.2_4.yml sets up Kafka for its CI. kafkajs is
# JavaScript and not a Go module, so its source is not fetched here: point
# KAFKAJS_DIR at a checkout of the tag (git clone -b v2.2.4
# https://github.com/tulios/kafkajs); its devDependencies (jest, …) are
# installed there with npm when node_modules is missing. Nothing of it is
# copied into this repository.
#
# kafkajs's testHelpers dial fixed ports on localhost: broker N (0-2) has
# PLAINTEXT on 9092+3N, SSL on 9093+3N and SASL_SSL on 9094+3N (PLAIN,
# SCRAM-SHA-256, SCRAM-SHA-512), so the brokers listen on 127.0.0.1:9092-9100
# and advertise localhost; the script stops if one of these ports is taken.
# As the compose file: node ids 0-2, default replication factor 2, two
# partitions for auto-created topics, group.initial.rebalance.delay.ms 0, the
# authorizer on with allow.everyone.if.no.acl.found; PLAIN users test, bob and
# alice (its server-jaas.conf) and the SCRAM user testscram (its
# createScramCredentials.sh, a different password per mechanism). The TLS
# certificate is made here with openssl (kafkajs's tests trust any:
# rejectUnauthorized false). As its waitForKafka.js, the topic
# test-topic-already-exists is created first, and the coordinators' topics
# are warmed up.
#
# testHelpers.addPartitions runs scripts/addPartitions.sh, which calls
# `docker exec <kafka1> bash -c "kafka-topics … --alter --topic T
# --partitions N"`: a `docker` shim first on PATH does that with `sediment
# topic alter` (and `kafka-topics --create`, `kafka-configs` for SCRAM users
# and client quotas, what kafkajs's other scripts ask for).
#
#   KAFKAJS_DIR          the checkout (required)
#   TESTS="src/admin"    jest test path patterns (default: every spec)
#   RUN="pattern"        jest --testNamePattern
#   KAFKA_VERSION=2.4    what the tests take the brokers for (kafkajs's CI's
#                        value; testIfKafkaAtLeast_* gates)
#   OAUTHBEARER=1        the SASL listeners take OAUTHBEARER only (unsigned
#                        tokens, --sasl-oauthbearer-unsecured) with
#                        connections.max.reauth.ms 15 s, as kafkajs's
#                        docker-compose.2_4_oauthbearer.yml, and the tests run
#                        with OAUTHBEARER_ENABLED=1 (kafkajs's
#                        test:group:oauthbearer; default TESTS: its six files)
#   JEST_WORKERS=2       jest --maxWorkers (kafkajs's CI: 4)
#   COMPAT_PORT=29440    the brokers' Raft addresses (+0..2) and metrics (+10..12)
#   BROKER_LOG_LEVEL     the brokers' --log-level (default warn)
#   BROKER_FLAGS         more flags for every broker
#   KEEP=1               keep the scratch folder (logs, data) even on success
#
# Prints `N passed, N failed, N skipped` (jest's test counts; a test file that
# fails to run counts as one failure) and jest's results in jest.json.
set -euo pipefail
GO=${GO:-go}
: "${KAFKAJS_DIR:?set KAFKAJS_DIR to a kafkajs checkout (v2.2.4)}"
KJS=$(cd "$KAFKAJS_DIR" && pwd)
PORT=${COMPAT_PORT:-29440}
export KAFKA_VERSION=${KAFKA_VERSION:-2.4}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

for p in $(seq 9092 9100) $PORT $((PORT + 1)) $((PORT + 2)) $((PORT + 10)) $((PORT + 11)) $((PORT + 12)); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "compat-kafkajs: something already listens on 127.0.0.1:$p (kafkajs's tests use 9092-9100, the brokers' Raft and metrics COMPAT_PORT=$PORT +0..2, +10..12); stop it first" >&2
		exit 1
	fi
done
command -v node > /dev/null && command -v npm > /dev/null || {
	echo "compat-kafkajs: needs node and npm" >&2
	exit 1
}

work=$(mktemp -d /tmp/sediment-compat-kafkajs.XXXXXX)
tests=""
stop() {
	[ -z "$tests" ] || kill "$tests" 2>/dev/null || true
	for n in 0 1 2; do
		[ -f "$work/broker$n.pid" ] && kill -TERM "$(cat "$work/broker$n.pid")" 2>/dev/null || true
	done
	for n in 0 1 2; do
		if [ -f "$work/broker$n.pid" ]; then
			p=$(cat "$work/broker$n.pid")
			for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		fi
	done
}
trap stop EXIT

if [ ! -x "$KJS/node_modules/.bin/jest" ]; then
	echo "compat-kafkajs: installing kafkajs's devDependencies with npm in $KJS" >&2
	(cd "$KJS" && npm install --no-audit --no-fund --ignore-scripts) > "$work/npm.log" 2>&1 ||
		{ echo "compat-kafkajs: npm install failed: $work/npm.log" >&2; exit 1; }
fi
echo "compat-kafkajs: building sediment in $work" >&2
(cd "$ROOT" && $GO build -o "$work/sediment" ./cmd/sediment)

# A CA and a certificate for localhost, for the SSL and SASL_SSL listeners.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
	-subj /CN=sediment-kafkajs-ca -keyout "$work/ca-key.pem" -out "$work/ca.pem" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-keyout "$work/broker-key.pem" -out "$work/broker.csr" 2> /dev/null
openssl x509 -req -in "$work/broker.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" -CAcreateserial -days 30 \
	-extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1') -out "$work/broker.pem" 2> /dev/null

sasl=(--sasl-enabled-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)
if [ "${OAUTHBEARER:-0}" = 1 ]; then
	sasl=(--sasl-enabled-mechanisms OAUTHBEARER --sasl-oauthbearer-unsecured --connections-max-reauth 15s)
	export OAUTHBEARER_ENABLED=1
fi
voters=""
seeds=""
for n in 0 1 2; do
	voters+="${voters:+,}$n@127.0.0.1:$((PORT + n))"
	seeds+="${seeds:+,}127.0.0.1:$((9092 + 3 * n))"
done
cat > "$work/start-broker" <<EOF
#!/usr/bin/env bash
n=\$1
p=\$((9092 + 3 * n))
nohup "$work/sediment" broker --node-id "\$n" \\
	--listeners "PLAINTEXT://127.0.0.1:\$p,SSL://127.0.0.1:\$((p + 1)),SASL_SSL://127.0.0.1:\$((p + 2))" \\
	--advertised-listeners "PLAINTEXT://localhost:\$p,SSL://localhost:\$((p + 1)),SASL_SSL://localhost:\$((p + 2))" \\
	--raft-address "127.0.0.1:\$(($PORT + n))" \\
	--admin-address "127.0.0.1:\$(($PORT + 10 + n))" \\
	--voters "$voters" \\
	--data-dir "$work/broker\$n" \\
	--ssl-cert-file "$work/broker.pem" --ssl-key-file "$work/broker-key.pem" \\
	${sasl[*]} \\
	--authorizer-enabled --allow-everyone-if-no-acl-found --super-users User:admin \\
	--default-replication-factor 2 --num-partitions 2 \\
	--group-initial-rebalance-delay 0s \\
	--log-level "${BROKER_LOG_LEVEL:-warn}" ${BROKER_FLAGS:-} >> "$work/broker\$n.log" 2>&1 < /dev/null &
echo \$! > "$work/broker\$n.pid"
EOF
chmod +x "$work/start-broker"
for n in 0 1 2; do
	"$work/start-broker" "$n"
done
deadline=$((SECONDS + 90))
until [ "$("$work/sediment" cluster status -b "$seeds" --timeout 5s 2> /dev/null | grep -c ' active ')" -eq 3 ]; do
	if [ $SECONDS -ge $deadline ]; then
		echo "compat-kafkajs: the brokers did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done
S() { "$work/sediment" "$@" -b "$seeds"; }
# The users of kafkajs's server-jaas.conf (PLAIN) and createScramCredentials.sh.
for u in test:testtest bob:bobbob alice:alicealice; do
	S user set "${u%%:*}" --password "${u#*:}" > /dev/null
done
S user set testscram --mechanism SCRAM-SHA-256 --password 'testtestscram=256' > /dev/null
S user set testscram --mechanism SCRAM-SHA-512 --password 'testtestscram=512' > /dev/null
S topic create test-topic-already-exists -p 2 -r 1 --if-not-exists > /dev/null
# As waitForKafka.js's warm-up (topics, a consumer group describe): a group
# member's FindCoordinator creates __consumer_offsets, a DescribeTransactions
# __transaction_state; wait until each of their 50 partitions has a leader
# and ListGroups and ListTransactions on every broker no longer answer
# COORDINATOR_LOAD_IN_PROGRESS, so that the tests' first groups and
# transactional producers do not meet coordinators still loading (kafkajs's
# broker-level tests do not retry it).
S topic create "test-topic-warm-up-$$" -p 1 > /dev/null
echo warm-up | S produce "test-topic-warm-up-$$" > /dev/null 2>&1
S consume "test-topic-warm-up-$$" --group "warm-up-$$" -n 1 > /dev/null
S txn describe "warm-up-$$" > /dev/null 2>&1 || true
led() { S topic describe "$1" 2>> "$work/warm-up.log" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/' | wc -l; }
deadline=$((SECONDS + 60))
until [ "$(led __consumer_offsets)" -eq 50 ] && [ "$(led __transaction_state)" -eq 50 ] &&
	S group list > /dev/null 2>> "$work/warm-up.log" && S txn list > /dev/null 2>> "$work/warm-up.log"; do
	if [ $SECONDS -ge $deadline ]; then
		echo "compat-kafkajs: the coordinators did not load __consumer_offsets and __transaction_state: $(tail -n 3 "$work/warm-up.log"); logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done

# The docker shim: `docker ps … -q` names the one "container", `docker exec
# ID bash -c "kafka-topics|kafka-configs …"` runs the equivalent sediment
# command.
mkdir -p "$work/bin"
cat > "$work/bin/docker" <<EOF
#!/usr/bin/env bash
echo "\$(date -u +%H:%M:%S.%N) docker shim: \$*" >> "$work/docker.log"
case "\${1:-}" in
ps) echo sediment-kafka1; exit 0 ;;
exec) ;;
*) echo "docker shim: not supported against Sediment: \$*" >&2; exit 1 ;;
esac
[ "\${3:-}" = bash ] && [ "\${4:-}" = -c ] || { echo "docker shim: exec ID bash -c CMD only" >&2; exit 1; }
eval "set -- \$5"
tool=\$1; shift
topic=; parts=; op=; cfg=; etype=; ename=
while [ \$# -gt 0 ]; do
	case \$1 in
	--topic) topic=\$2; shift 2 ;;
	--partitions) parts=\$2; shift 2 ;;
	--alter|--create) op=\${1#--}; shift ;;
	--add-config) cfg=\$2; shift 2 ;;
	--entity-type) etype=\$2; shift 2 ;;
	--entity-name) ename=\$2; shift 2 ;;
	--zookeeper|--replication-factor|--bootstrap-server) shift 2 ;;
	*) shift ;;
	esac
done
S() { "$work/sediment" "\$@" -b "$seeds"; }
case \$tool:\$op in
kafka-topics:alter) S topic alter "\$topic" -p "\$parts" ;;
kafka-topics:create) S topic create "\$topic" -p "\$parts" -r 1 --if-not-exists ;;
kafka-configs:alter)
	case \$etype in
	users)
		for m in 256 512; do
			pw=\$(echo "\$cfg" | command sed -n "s/.*SCRAM-SHA-\$m=\[\([^]]*,\)\{0,1\}password=\([^],]*\).*/\2/p")
			[ -z "\$pw" ] || S user set "\$ename" --mechanism "SCRAM-SHA-\$m" --password "\$pw"
		done ;;
	clients)
		S quota set --client "\$ename" \${cfg//,/ } ;;
	*) echo "docker shim: kafka-configs --entity-type \$etype not supported" >&2; exit 1 ;;
	esac ;;
*) echo "docker shim: not supported against Sediment: \$tool \$op" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/bin/docker"

if [ -z "${TESTS:-}" ] && [ "${OAUTHBEARER:-0}" = 1 ]; then
	TESTS="src/producer/index.spec.js src/broker/__tests__/connect.spec.js src/consumer/__tests__/connection.spec.js src/broker/__tests__/disconnect.spec.js src/admin/__tests__/connection.spec.js src/broker/__tests__/reauthenticate.spec.js"
fi
echo "compat-kafkajs: kafkajs $(node -p "require('$KJS/package.json').version") tests, KAFKA_VERSION=$KAFKA_VERSION TESTS=${TESTS:-all} RUN=${RUN:-}" >&2
rc=0
# shellcheck disable=SC2086
(cd "$KJS" && exec env PATH="$work/bin:$PATH" NODE_ENV=test KAFKAJS_DEBUG_PROTOCOL_BUFFERS=1 \
	node_modules/.bin/jest --ci --no-watchman --forceExit --maxWorkers="${JEST_WORKERS:-2}" \
	--json --outputFile="$work/jest.json" ${RUN:+--testNamePattern "$RUN"} ${TESTS:-}) > "$work/jest.log" 2>&1 &
tests=$!
wait "$tests" || rc=$?
tests=""
# Each failed test (and each test file that did not run), then the counts.
node -e '
const r = require(process.argv[1])
for (const s of r.testResults) {
  const file = s.name.slice(process.argv[2].length + 1)
  if (s.status === "failed" && s.assertionResults.length === 0) console.log(`FAILED ${file}: ${(s.message || "").split("\n").find(l => l.trim()) || "did not run"}`)
  for (const t of s.assertionResults) if (t.status === "failed") console.log(`FAILED ${file}: ${t.fullName}`)
}' "$work/jest.json" "$KJS" 2> /dev/null | tee "$work/failed.txt" >&2 || true
read -r pass fail skip suitefail < <(node -e '
const r = require(process.argv[1])
console.log(r.numPassedTests, r.numFailedTests, r.numPendingTests + r.numTodoTests, r.numRuntimeErrorTestSuites)
' "$work/jest.json" 2> /dev/null || echo "0 0 0 1")
fail=$((fail + suitefail))
for n in 0 1 2; do
	if ! kill -0 "$(cat "$work/broker$n.pid")" 2> /dev/null; then
		echo "compat-kafkajs: broker $n is not running at the end of the run" >&2
		fail=$((fail + 1))
	fi
done
echo "kafkajs $(node -p "require('$KJS/package.json').version") tests (KAFKA_VERSION=$KAFKA_VERSION${OAUTHBEARER:+ OAUTHBEARER=$OAUTHBEARER}) against 3 Sediment brokers: $pass passed, $fail failed, $skip skipped (jest tests)"
status=0
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
	status=1
fi
if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
	echo "compat-kafkajs: logs (jest.log, jest.json, broker*.log, docker.log) kept in $work" >&2
	exit "$status"
fi
stop
rm -rf "$work"
