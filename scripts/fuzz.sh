#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME (default 5s) each.
# go test -fuzz takes one target per invocation, so we list them first.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-5s}"
found=0
while IFS= read -r pkg; do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for fn in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u); do
		found=$((found+1))
		echo "fuzz: $pkg $fn ($FUZZTIME)"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" "$pkg"
	done
done < <(go list ./...)
echo "fuzz: $found targets run"
