#!/usr/bin/env bash
# test-summary.sh LOG: after a failed `make test`, repeat at the very end of the
# output what failed, so that a CI log cut to its last lines still names it:
# every "--- FAIL" line, and for a package that hit -timeout, the tests that
# were running (go test prints them at the top of its goroutine dump, which
# can be thousands of lines long).
log=${1:?usage: test-summary.sh LOG}
[ -f "$log" ] || exit 0
echo
echo "==== make test: what failed ===="
grep -E -- '^(\s*--- FAIL|FAIL\s|panic: )' "$log" | grep -v -- '^panic: test timed out' | head -60
awk '
/^panic: test timed out/ { print; inrun = 0; want = 1; next }
want && /^[ \t]*running tests:/ { print; inrun = 1; next }
inrun && /^\t\t/ { print; next }
inrun { inrun = 0; want = 0 }
' "$log"
echo "==== (full output above) ===="
