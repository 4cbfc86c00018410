package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster: v0-2
//
// Cluster id, the controller (this broker: every broker takes admin
// requests) and the brokers on the client's listener. v1 endpoint type
// (only brokers, 1, are served; controllers, 2, are not exposed), v2
// fenced brokers on request.

func init() { regKey(60, 0, 2).handler = handleDescribeCluster }

func handleDescribeCluster(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	if r.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.EndpointType = req.EndpointType
		return &Reply{Msg: resp}, nil
	}
	st := b.meta.State()
	resp.EndpointType = 1
	resp.ClusterID = st.ClusterID
	resp.ControllerID = b.controllerID(st)
	resp.ClusterAuthorizedOperations = authorizedOpsUnknown
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = clusterOperations
	}
	for _, br := range st.Brokers() {
		if len(br.Listeners) == 0 || (br.Fenced && !req.IncludeFencedBrokers) {
			continue
		}
		l := br.Listeners[0]
		for _, bl := range br.Listeners {
			if bl.Name == r.Conn.Listener {
				l = bl
			}
		}
		mb := kmsg.NewDescribeClusterResponseBroker()
		mb.NodeID, mb.Host, mb.Port, mb.IsFenced = br.ID, l.Host, l.Port, br.Fenced
		if br.Rack != "" {
			mb.Rack = kmsg.StringPtr(br.Rack)
		}
		resp.Brokers = append(resp.Brokers, mb)
	}
	return &Reply{Msg: resp}, nil
}
