# Sourced by the scripts/compat-*.sh: count_tests LOG sets pass, fail and
# skip to the top-level test results of a `go test -v` log (`--- PASS` etc.
# at the start of a line); a panic counts as one more failure and its first
# lines go to stderr.
count_tests() {
	local log=$1
	pass=$(grep -c '^--- PASS' "$log" || true)
	fail=$(grep -c '^--- FAIL' "$log" || true)
	skip=$(grep -c '^--- SKIP' "$log" || true)
	if grep -q '^panic: ' "$log"; then
		grep -m1 -A2 '^panic: ' "$log" >&2
		fail=$((fail + 1))
	fi
}
