#!/usr/bin/env bash
# Three brokers on localhost:9092, 9093 and 9094, each also a voter of a
# three-voter metadata quorum (Raft on 19092-19094, metrics on 9644-9646),
# data under ./data/cluster/broker<N>. Runs in the foreground; Ctrl-C (or
# SIGTERM) stops all three gracefully (controlled shutdown).
set -euo pipefail
BIN=${BIN:-./bin/sediment}
DATA=${DATA:-./data/cluster}
VOTERS="1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094"
pids=()
stop() {
	trap - INT TERM
	echo "cluster: stopping brokers ${pids[*]}" >&2
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	exit 0
}
trap stop INT TERM
for n in 1 2 3; do
	mkdir -p "$DATA/broker$n"
	"$BIN" broker --node-id "$n" \
		--listeners "PLAINTEXT://localhost:909$((n + 1))" \
		--raft-address "127.0.0.1:1909$((n + 1))" \
		--admin-address "127.0.0.1:964$((n + 3))" \
		--data-dir "$DATA/broker$n" \
		--voters "$VOTERS" \
		--default-replication-factor 3 \
		"$@" > >(sed -u "s/^/[broker$n] /") 2>&1 &
	pids+=($!)
done
echo "cluster: brokers on localhost:9092,localhost:9093,localhost:9094; Ctrl-C stops them" >&2
wait -n || true
stop
