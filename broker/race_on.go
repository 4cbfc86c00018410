//go:build race

package broker

// raceEnabled: built with the race detector (go test -race), which turns on
// costly checks (framepool.go).
const raceEnabled = true
