package main

import (
	"fmt"
	"net"
	"strings"
)

// parsePeerAddresses parses the peer-addresses setting: comma-separated
// advertised=dialed pairs of host:port (broker.Config.PeerAddresses).
func parsePeerAddresses(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("peer-addresses: %q is not advertised=dialed", part)
		}
		for _, a := range []string{from, to} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("peer-addresses: %q: %w", part, err)
			}
		}
		if _, dup := out[from]; dup {
			return nil, fmt.Errorf("peer-addresses: %s twice", from)
		}
		out[from] = to
	}
	return out, nil
}
