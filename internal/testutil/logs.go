package testutil

import "strings"

// LogHasLine reports whether one line of log holds every one of parts (a
// log line's attributes come in an order the test need not know).
func LogHasLine(log string, parts ...string) bool {
	for line := range strings.Lines(log) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
