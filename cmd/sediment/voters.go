package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/sediment-io/sediment/metadata"
)

// parseVoters parses the voters setting: comma-separated id@host:port
// (Kafka's controller.quorum.voters form).
func parseVoters(s string) ([]metadata.Peer, error) {
	var out []metadata.Peer
	seen := map[int32]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idStr, addr, ok := strings.Cut(part, "@")
		id, err := strconv.ParseInt(idStr, 10, 32)
		if !ok || err != nil || id < 0 {
			return nil, fmt.Errorf("voters: %q is not id@host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("voters: %q: %w", part, err)
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("voters: id %d twice", id)
		}
		seen[int32(id)] = true
		out = append(out, metadata.Peer{ID: int32(id), Addr: addr})
	}
	return out, nil
}
