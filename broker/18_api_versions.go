package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions: v0-4
//
// Built from the handler registry. A request newer than v4 never reaches
// this handler: the connection answers it with the v0-shaped
// UNSUPPORTED_VERSION reply carrying these ranges, as Kafka does, and the
// client retries at a version we support. v3+ carries the client's software
// name and version (logged at debug level). The response header of
// ApiVersions is always header v0, even for flexible versions.

func init() { regKey(18, 0, 4).handler = handleApiVersions }

func handleApiVersions(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = supportedAPIs()
	if r.Version >= 3 {
		b.log.Debug("client software", "name", req.ClientSoftwareName, "version", req.ClientSoftwareVersion, "conn", r.Conn.ID)
	}
	return &Reply{Msg: resp}, nil
}
