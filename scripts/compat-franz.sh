#!/usr/bin/env bash
# franz-go's own kgo test suite (integration tests included) against Sediment
# brokers built from this tree. The kgo package is our go.mod's franz-go
# version, tested straight from the module cache (`go test -c` of a
# dependency's package); nothing of it is copied into the repository.
#
#   BROKERS=1|3          brokers (3: a three-voter quorum, KGO_TEST_RF=3)
#   KGO_TEST_RF          replication factor of the tests' topics (default BROKERS)
#   BROKER_LOG_LEVEL     the brokers' --log-level (default warn)
#   COMPAT_PORT=29192    first Kafka port; Raft, metrics, SASL_PLAINTEXT use +100, +200, +300
#                        (SCRAM and unsecured OAUTHBEARER on the SASL_PLAINTEXT listeners)
#   KGO_TEST_RECORDS     records of the ETL tests (default 20000; franz-go: 500000)
#   RUN                  -test.run pattern (default: every test)
#   TEST_TIMEOUT         -test.timeout (default 20m)
#   KEEP=1               keep the scratch folder (logs, data) even on success
#   RESTART_EVERY=40     with BROKERS=3: restart one broker after another
#                        (SIGTERM, start again) every 40 s while the tests run
# Any other KGO_* variable (KGO_TEST_UNSAFE, KGO_LOG_LEVEL, ...) is passed on.
set -euo pipefail
. "$(dirname "$0")/compat-count.sh"
GO=${GO:-go}
BROKERS=${BROKERS:-1}
PORT=${COMPAT_PORT:-29192}
RUN=${RUN:-.}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}
export KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-20000}
export KGO_LOG_LEVEL=${KGO_LOG_LEVEL:-none}
export KGO_TEST_RF=${KGO_TEST_RF:-$BROKERS}

work=$(mktemp -d /tmp/sediment-compat-franz.XXXXXX)
pids=()
tests=""
stop() {
	[ -z "$tests" ] || kill "$tests" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT

echo "compat-franz: building sediment and franz-go's kgo tests in $work" >&2
$GO build -o "$work/sediment" ./cmd/sediment
$GO test -c -o "$work/kgo.test" github.com/twmb/franz-go/pkg/kgo
kgodir=$($GO list -m -f '{{.Dir}}' github.com/twmb/franz-go)
kgover=$($GO list -m -f '{{.Version}}' github.com/twmb/franz-go)

voters=""
seeds=""
scram_seeds=""
for n in $(seq 1 "$BROKERS"); do
	voters+="${voters:+,}$n@127.0.0.1:$((PORT + 100 + n - 1))"
	seeds+="${seeds:+,}127.0.0.1:$((PORT + n - 1))"
	scram_seeds+="${scram_seeds:+,}127.0.0.1:$((PORT + 300 + n - 1))"
done
extra=()
if [ "$BROKERS" -gt 1 ]; then
	extra=(--voters "$voters" --default-replication-factor "$BROKERS")
fi
start() { # start N: broker N in the background; its pid in pids[N-1]
	local n=$1
	"$work/sediment" broker --node-id "$n" \
		--listeners "PLAINTEXT://127.0.0.1:$((PORT + n - 1)),SASL_PLAINTEXT://127.0.0.1:$((PORT + 300 + n - 1))" \
		--raft-address "127.0.0.1:$((PORT + 100 + n - 1))" \
		--admin-address "127.0.0.1:$((PORT + 200 + n - 1))" \
		--data-dir "$work/broker$n" \
		--group-initial-rebalance-delay 0s \
		--sasl-enabled-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER --sasl-oauthbearer-unsecured \
		--log-level "${BROKER_LOG_LEVEL:-warn}" "${extra[@]}" >> "$work/broker$n.log" 2>&1 &
	pids[n - 1]=$!
}
for n in $(seq 1 "$BROKERS"); do
	start "$n"
done
# Ready when every broker is active in the metadata.
deadline=$((SECONDS + 60))
until [ "$("$work/sediment" cluster status -b "$seeds" --timeout 5s 2>/dev/null | grep -c ' active ')" -eq "$BROKERS" ]; do
	if [ $SECONDS -ge $deadline ]; then
		echo "compat-franz: the brokers did not come up; logs in $work" >&2
		exit 1
	fi
	sleep 0.5
done

# A SCRAM user for TestSCRAMAuth and TestSCRAMAuthBadCredentials, on the
# SASL_PLAINTEXT listeners (Kafka port + 300).
"$work/sediment" user set -b "$seeds" compat --password compat-secret >/dev/null
export KGO_TEST_SCRAM_SEEDS=$scram_seeds KGO_TEST_SCRAM=compat:compat-secret:256
# TestOAuthAuth: the same listeners take unsecured OAUTHBEARER tokens, as
# Kafka's default validator (--sasl-oauthbearer-unsecured).
export KGO_TEST_OAUTH_SEEDS=$scram_seeds

echo "compat-franz: franz-go $kgover kgo tests, KGO_SEEDS=$seeds KGO_TEST_RF=$KGO_TEST_RF KGO_TEST_RECORDS=$KGO_TEST_RECORDS RUN=$RUN" >&2
rc=0
(cd "$kgodir/pkg/kgo" && exec env KGO_SEEDS="$seeds" "$work/kgo.test" -test.v -test.run "$RUN" -test.timeout "$TEST_TIMEOUT") > "$work/kgo.log" 2>&1 &
tests=$!
if [ -n "${RESTART_EVERY:-}" ] && [ "$BROKERS" -gt 1 ]; then
	# A rolling restart while the tests run: every RESTART_EVERY seconds
	# the next broker is stopped (SIGTERM, controlled shutdown) and started
	# again on the same data.
	n=1
	while sleep "$RESTART_EVERY" && kill -0 "$tests" 2>/dev/null; do
		echo "compat-franz: restarting broker $n" >&2
		kill -TERM "${pids[n - 1]}"
		wait "${pids[n - 1]}" || true
		start "$n"
		n=$((n % BROKERS + 1))
	done
fi
wait "$tests" || rc=$?
grep -E '^--- (FAIL|SKIP)' "$work/kgo.log" || true
count_tests "$work/kgo.log"
for p in "${pids[@]}"; do
	if ! kill -0 "$p" 2>/dev/null; then
		echo "compat-franz: broker process $p died during the run" >&2
		fail=$((fail + 1))
	fi
done
echo "franz-go kgo $kgover against $BROKERS Sediment broker(s): $pass passed, $fail failed, $skip skipped (top-level tests)"
status=0
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
	status=1
fi
if [ "$status" -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then
	echo "compat-franz: logs (kgo.log, broker*.log) kept in $work" >&2
	exit "$status"
fi
stop
rm -rf "$work"
