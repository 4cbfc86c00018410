package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions: v0-5
//
// Built from the handler registry. A request newer than v5 never reaches
// this handler: the connection answers it with the v0-shaped
// UNSUPPORTED_VERSION reply carrying the ApiVersions range alone, as Kafka
// does, and the client retries at a version we support. v5 (KIP-1242,
// Kafka 4.4) names the cluster and node the client expects to reach: when
// the cluster id is given and it or the node id is not this broker's, the
// answer is REBOOTSTRAP_REQUIRED (the client's address now leads to
// another broker or cluster: it goes back to its bootstrap servers); a node
// id without a cluster id is INVALID_REQUEST; both without keys, as Kafka
// answers. v3+ carries the client's software
// name and version (logged at debug level), and the answer the features
// (features.go): the ranges this broker supports, and the levels finalized
// in the cluster with the Raft index of their last change as the epoch. A
// feature at level 0 is not finalized and is left out. Below v4 a supported
// feature whose range starts at 0 is left out too (KAFKA-17011 and
// KAFKA-17492: Java clients before 3.9 fail on such a range), which leaves
// all of ours out there. The response header of ApiVersions is always header
// v0, even for flexible versions.

func init() { regKey(18, 0, 5).handler = handleApiVersions }

func handleApiVersions(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if r.Version >= 5 {
		switch {
		case req.ClusterID == nil && req.NodeID != -1:
			resp.ErrorCode = kerr.InvalidRequest.Code
			return &Reply{Msg: resp}, nil
		case req.ClusterID != nil && (*req.ClusterID != b.meta.State().ClusterID || req.NodeID != b.cfg.NodeID):
			b.log.Debug("ApiVersions meant for another broker or cluster (KIP-1242): REBOOTSTRAP_REQUIRED",
				"cluster", *req.ClusterID, "node", req.NodeID, "conn", r.Conn.ID)
			resp.ErrorCode = kerr.RebootstrapRequired.Code
			return &Reply{Msg: resp}, nil
		}
	}
	resp.ApiKeys = supportedAPIs()
	if r.Version >= 3 {
		b.log.Debug("client software", "name", req.ClientSoftwareName, "version", req.ClientSoftwareVersion, "conn", r.Conn.ID)
		st := b.meta.State()
		for _, f := range b.supportedFeatures() {
			if r.Version >= 4 || f.Min > 0 {
				sf := kmsg.NewApiVersionsResponseSupportedFeature()
				sf.Name, sf.MinVersion, sf.MaxVersion = f.Name, f.Min, f.Max
				resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
			}
			if level := st.FeatureLevel(f.Name, f.DefaultLevel); level > 0 {
				ff := kmsg.NewApiVersionsResponseFinalizedFeature()
				ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = f.Name, level, level
				resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
			}
		}
		resp.FinalizedFeaturesEpoch = st.FeaturesEpoch()
	}
	return &Reply{Msg: resp}, nil
}
