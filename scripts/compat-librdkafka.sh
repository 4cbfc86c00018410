#!/usr/bin/env bash
# librdkafka's own test suite (its tests/0xxx programs, the ones that need a
# broker) against three Sediment brokers built from this tree, the cluster
# shape librdkafka's CI gives them (trivup: three brokers, replication factor
# 3, four partitions for auto-created topics, racks). librdkafka is C and not
# a Go module, so its source is not fetched here: point LIBRDKAFKA_DIR at a
# checkout (git clone https://github.com/confluentinc/librdkafka); nothing of
# it is copied into this repository.
#
#   LIBRDKAFKA_DIR        the checkout (required); built here when its
#                         tests/test-runner is missing: ./configure
#                         --disable-gssapi --disable-curl, make libs, make -C
#                         tests build (Debian: build-essential zlib1g-dev
#                         libssl-dev libzstd-dev liblz4-dev rapidjson-dev)
#   TESTS="0011 0103"     test numbers to run (default: every test that needs
#                         a broker; -L skips the local and mock-cluster ones)
#   QUICK=1               librdkafka's quick mode (-Q)
#   TEST_KAFKA_VERSION    what the tests take the broker for (default 4.0.0,
#                         the level of Sediment's API versions)
#   COMPAT_PORT=29700     first of the brokers' ports (Kafka +0..2, Raft
#                         +10..12, admin +20..22)
#   PER_TEST_TIMEOUT=900  seconds for one test number (0113 needs ~12 min)
#   KEEP=1                keep the scratch folder (logs, data) even on success
#   TEST_TIMEOUT_MULTIPLIER=2  librdkafka's test.timeout.multiplier (its
#                         share consumer tests poll for fixed times that
#                         add up to about their timeouts)
#   AUTHORIZER=1          the brokers' authorizer (default 1): on, as in
#                         librdkafka's CI, whose trivup (0.15.0, the version
#                         in its tests/requirements.txt) gives every broker
#                         StandardAuthorizer, allow.everyone.if.no.acl.found=
#                         true and super.users=User:admin; so here
#                         --authorizer-enabled --allow-everyone-if-no-acl-found
#                         --super-users User:admin. The clients are
#                         User:ANONYMOUS (PLAINTEXT), not super users, so the
#                         ACLs that 0109, 0115 and 0119 add deny them; with no
#                         ACL on a resource everything is allowed, as without
#                         the authorizer. AUTHORIZER=0: no authorizer (the ACL
#                         APIs then answer SECURITY_DISABLED).
#
# Each test number runs in its own test-runner process (one failure aborts
# the rest of a test's subtests). The summary lists every test as PASSED,
# FAILED or SKIPPED; docs/compatibility.md says which failures are features
# Sediment or this script does not have (SSL and SASL listeners, the Java
# client, dynamic broker configs but the throttle rates).
set -euo pipefail
GO=${GO:-go}
: "${LIBRDKAFKA_DIR:?set LIBRDKAFKA_DIR to a librdkafka checkout}"
RDK=$(cd "$LIBRDKAFKA_DIR" && pwd)
PORT=${COMPAT_PORT:-29700}
export TEST_KAFKA_VERSION=${TEST_KAFKA_VERSION:-4.0.0}
PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-900}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCRATCH=$(mktemp -d /tmp/compat-librdkafka.XXXXXX)
echo "scratch: $SCRATCH"

if [ ! -x "$RDK/tests/test-runner" ]; then
	(cd "$RDK" && ./configure --disable-gssapi --disable-curl && make -j2 libs && make -C tests -j2 build) > "$SCRATCH/build.log" 2>&1 ||
		{ echo "building librdkafka failed: $SCRATCH/build.log" >&2; exit 1; }
fi
(cd "$ROOT" && $GO build -o "$SCRATCH/sediment" ./cmd/sediment)

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "${KEEP:-0}" != 1 ] && [ "${failed:-1}" = 0 ]; then rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

authz=()
if [ "${AUTHORIZER:-1}" = 1 ]; then
	# The brokers' own requests (replica fetches, markers) come as
	# User:ANONYMOUS through the PLAINTEXT listener and need CLUSTER_ACTION
	# on the cluster: allowed while no ACL names the cluster (trivup's
	# brokers talk as User:admin, a super user; none of the tests puts an ACL
	# on the cluster).
	authz=(--authorizer-enabled --allow-everyone-if-no-acl-found --super-users User:admin)
fi
voters="1@127.0.0.1:$((PORT + 10)),2@127.0.0.1:$((PORT + 11)),3@127.0.0.1:$((PORT + 12))"
seeds=
for n in 1 2 3; do
	mkdir -p "$SCRATCH/data$n"
	"$SCRATCH/sediment" broker --node-id $n --listeners "PLAINTEXT://127.0.0.1:$((PORT + n - 1))" \
		--raft-address "127.0.0.1:$((PORT + 9 + n))" --admin-address "127.0.0.1:$((PORT + 19 + n))" \
		--data-dir "$SCRATCH/data$n" --voters "$voters" --default-replication-factor 3 \
		--num-partitions 4 --broker-rack "RACK$n" "${authz[@]}" --log-level "${BROKER_LOG_LEVEL:-info}" > "$SCRATCH/broker$n.log" 2>&1 &
	pids+=($!)
	seeds="$seeds${seeds:+,}127.0.0.1:$((PORT + n - 1))"
done
for _ in $(seq 120); do
	if "$SCRATCH/sediment" cluster status --brokers "$seeds" --timeout 5s 2>/dev/null | grep -c ' active ' | grep -qx 3; then
		break
	fi
	sleep 1
done
"$SCRATCH/sediment" cluster status --brokers "$seeds"

# kafka-topics.sh for the tests that call it (test_kafka_topics): create,
# alter and delete through sediment topic.
mkdir -p "$SCRATCH/kafka/bin"
cat > "$SCRATCH/kafka/bin/kafka-topics.sh" <<SHIM
#!/usr/bin/env bash
set -u
bs=; op=; topic=; parts=; rf=; cfgs=()
while [ \$# -gt 0 ]; do
	case "\$1" in
	--bootstrap-server) bs=\$2; shift 2;;
	--create|--alter|--delete) op=\${1#--}; shift;;
	--topic) topic=\$2; shift 2;;
	--partitions) parts=\$2; shift 2;;
	--replication-factor) rf=\$2; shift 2;;
	--config) cfgs+=(-c "\$2"); shift 2;;
	*) echo "kafka-topics.sh (sediment shim): unsupported argument \$1" >&2; exit 2;;
	esac
done
case \$op in
create) exec "$SCRATCH/sediment" topic create "\$topic" \${parts:+-p \$parts} \${rf:+-r \$rf} "\${cfgs[@]}" --brokers "\$bs";;
alter) exec "$SCRATCH/sediment" topic alter "\$topic" \${parts:+-p \$parts} "\${cfgs[@]}" --brokers "\$bs";;
delete) exec "$SCRATCH/sediment" topic delete "\$topic" --brokers "\$bs";;
esac
SHIM
chmod +x "$SCRATCH/kafka/bin/kafka-topics.sh"

# kafka-acls.sh for the tests that call it (0109, 0115, 0119: --add or
# --remove --force, --allow-principal / --deny-principal, --operation,
# --allow-host / --deny-host, --topic): sediment acl takes kafka-acls.sh's
# flags, so only the action and --bootstrap-server are translated.
cat > "$SCRATCH/kafka/bin/kafka-acls.sh" <<SHIM
#!/usr/bin/env bash
set -u
op=; args=()
while [ \$# -gt 0 ]; do
	case "\$1" in
	--bootstrap-server) args+=(--brokers "\$2"); shift 2;;
	--add) op=create; shift;;
	--remove) op=delete; shift;;
	--list) op=list; shift;;
	--command-config|--authorizer|--authorizer-properties)
		echo "kafka-acls.sh (sediment shim): unsupported argument \$1" >&2; exit 2;;
	*) args+=("\$1"); shift;;
	esac
done
[ -n "\$op" ] || { echo "kafka-acls.sh (sediment shim): one of --add, --remove, --list" >&2; exit 2; }
exec "$SCRATCH/sediment" acl "\$op" "\${args[@]}"
SHIM
chmod +x "$SCRATCH/kafka/bin/kafka-acls.sh"
export KAFKA_PATH="$SCRATCH/kafka" BROKERS="$seeds"
echo "metadata.broker.list=$seeds" > "$SCRATCH/test.conf"
if [ -n "${TEST_TIMEOUT_MULTIPLIER:-}" ]; then
	echo "test.timeout.multiplier=$TEST_TIMEOUT_MULTIPLIER" >> "$SCRATCH/test.conf"
fi
export RDKAFKA_TEST_CONF="$SCRATCH/test.conf" TEST_SCENARIO=default
export LD_LIBRARY_PATH="$RDK/src:$RDK/src-cpp"

cd "$RDK/tests"
tests=${TESTS:-$(ls 0[0-9][0-9][0-9]-*.c 0[0-9][0-9][0-9]-*.cpp 2>/dev/null | cut -c1-4 | sort -u)}
q=
if [ "${QUICK:-0}" = 1 ]; then q=-Q; fi
mkdir -p "$SCRATCH/logs"
for n in $tests; do
	rc=0
	TESTS=$n timeout -s KILL "$PER_TEST_TIMEOUT" ./test-runner -p1 -L $q > "$SCRATCH/logs/$n.log" 2>&1 || rc=$?
	echo "$n rc=$rc"
done

# Summary: each test's line of test-runner's final table.
failed=0
for f in "$SCRATCH"/logs/*.log; do
	clean=$(sed 's/\x1b\[[0-9;]*m//g' "$f")
	rows=$(echo "$clean" | grep -E '^\|\s+[0-9]{4}_\S+\s+\|\s+(PASSED|FAILED|SKIPPED)' | grep -v '_local ' || true)
	if [ -n "$rows" ]; then
		echo "$rows"
	elif ! echo "$clean" | grep -q 'ALL TESTS PASSED'; then
		# No summary table: the runner aborted on a failed assertion.
		echo "| $(basename "$f" .log) | FAILED | $(echo "$clean" | grep -m1 -E 'Test assertion failed|failed at' | cut -c1-160)"
	fi # else: only local tests, filtered out by -L
done | tee "$SCRATCH/summary.txt"
p=$(grep -c '| *PASSED' "$SCRATCH/summary.txt" || true)
f=$(grep -c '| *FAILED' "$SCRATCH/summary.txt" || true)
s=$(grep -c '| *SKIPPED' "$SCRATCH/summary.txt" || true)
echo "librdkafka tests: $p passed, $f failed, $s skipped (logs: $SCRATCH/logs)"
if [ "$f" != 0 ]; then failed=1; fi
exit 0
