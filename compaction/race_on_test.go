//go:build race

package compaction

const raceEnabled = true
