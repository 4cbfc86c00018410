#!/usr/bin/env bash
# test-summary.sh LOG: after a failed `make test`, repeat at the very end of the
# output what failed, so that a CI log cut to its last lines still names it:
# every "--- FAIL" line, and for a package that hit -timeout, the tests that
# were running and where their goroutines were stuck (go test prints the
# names at the top of a goroutine dump that can be thousands of lines long).
log=${1:?usage: test-summary.sh LOG}
[ -f "$log" ] || exit 0
echo
echo "==== make test: what failed ===="
grep -E -- '^(\s*--- FAIL|FAIL\s|panic: )' "$log" | grep -v -- '^panic: test timed out' | head -60
awk '
/^panic: test timed out/ { print; want = 1; inrun = 0; ndump++; next }
want && /^[ \t]*running tests:/ { inrun = 1; next }
inrun && /^\t\t/ {
	print
	name = $1; sub(/\/.*/, "", name)
	running[ndump, name] = 1
	next
}
inrun { inrun = 0; want = 0; indump = ndump }
# The goroutine dump: blocks separated by blank lines, the last one ended by
# the FAIL line of the package. Print the ones that run a test still running
# (its function is on the stack), 40 lines at most each.
function flush(   k, kk, show) {
	show = 0
	for (k in running) {
		split(k, kk, SUBSEP)
		if (kk[1] == indump && (index(block, "." kk[2] "(") > 0 || index(block, "." kk[2] ".func") > 0)) show = 1
	}
	if (show) print "\n" block
	block = ""
}
indump && /^goroutine [0-9]+ \[/ { if (block != "") flush(); block = $0; n = 1; next }
indump && block != "" && (/^$/ || /^(FAIL|ok|exit status)/) { flush(); if (!/^$/) indump = 0; next }
indump && block != "" { if (n++ < 40) block = block "\n" $0; next }
END { if (block != "") flush() }
' "$log"
echo "==== (full output above) ===="
