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
// name and version (logged at debug level), and the answer the features:
// transaction.version is supported at levels 0-2 and finalized at 2
// (KIP-890 part 2: Produce v12+ adds partitions to the transaction,
// TxnOffsetCommit v5 adds the offsets partition, EndTxn v5 bumps the epoch),
// or at 0 with Transactions.ClassicOnly. The response header of ApiVersions
// is always header v0, even for flexible versions.

func init() { regKey(18, 0, 4).handler = handleApiVersions }

func handleApiVersions(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = supportedAPIs()
	if r.Version >= 3 {
		b.log.Debug("client software", "name", req.ClientSoftwareName, "version", req.ClientSoftwareVersion, "conn", r.Conn.ID)
		level := int16(2)
		if b.cfg.Transactions.ClassicOnly {
			level = 0
		}
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = "transaction.version", 0, 2
		resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = "transaction.version", level, level
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		// The features never change while a broker runs.
		resp.FinalizedFeaturesEpoch = 1
	}
	return &Reply{Msg: resp}, nil
}
