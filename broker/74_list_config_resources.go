package broker

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListConfigResources: v0-1
//
// The config resources an admin client can describe and alter (KIP-1142,
// Kafka 4.1's Admin.listConfigResources; v0 was KIP-714's
// ListClientMetricsResources and lists client-metrics subscriptions only).
// v1 lists the types asked for, every supported one when none is: GROUP
// (groups with configs set), CLIENT_METRICS (none: Sediment serves no
// client telemetry), BROKER_LOGGER and BROKER (the brokers with a listener
// of the connection's name, by id), TOPIC (every topic, internal ones
// included), in that order, as Kafka lists them. A type outside those fails
// the whole request with UNSUPPORTED_VERSION, as Kafka. Needs
// DESCRIBE_CONFIGS on the cluster (authz.go).

func init() { regKey(74, 0, 1).handler = handleListConfigResources }

func handleListConfigResources(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.ListConfigResourcesRequest)
	resp := req.ResponseKind().(*kmsg.ListConfigResourcesResponse)
	supported := []kmsg.ConfigResourceType{kmsg.ConfigResourceTypeGroupConfig, kmsg.ConfigResourceTypeClientMetrics,
		kmsg.ConfigResourceTypeBrokerLogger, kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeTopic}
	wanted := map[kmsg.ConfigResourceType]bool{}
	switch {
	case r.Version == 0:
		wanted[kmsg.ConfigResourceTypeClientMetrics] = true
	case len(req.ResourceTypes) == 0:
		for _, t := range supported {
			wanted[t] = true
		}
	default:
		for _, t := range req.ResourceTypes {
			ok := false
			for _, s := range supported {
				ok = ok || kmsg.ConfigResourceType(t) == s
			}
			if !ok {
				resp.ErrorCode = kerr.UnsupportedVersion.Code
				return &Reply{Msg: resp}, nil
			}
			wanted[kmsg.ConfigResourceType(t)] = true
		}
	}
	add := func(t kmsg.ConfigResourceType, name string) {
		c := kmsg.NewListConfigResourcesResponseConfigResource()
		c.Name, c.Type = name, int8(t)
		resp.ConfigResources = append(resp.ConfigResources, c)
	}
	st := b.meta.State()
	var brokers []string
	for _, br := range st.Brokers() { // by id
		for _, l := range br.Listeners {
			if r.Conn == nil || l.Name == r.Conn.Listener {
				brokers = append(brokers, strconv.Itoa(int(br.ID)))
				break
			}
		}
	}
	for _, t := range supported {
		if !wanted[t] {
			continue
		}
		switch t {
		case kmsg.ConfigResourceTypeGroupConfig:
			for _, g := range st.ConfiguredGroups() {
				add(t, g)
			}
		case kmsg.ConfigResourceTypeBrokerLogger, kmsg.ConfigResourceTypeBroker:
			for _, id := range brokers {
				add(t, id)
			}
		case kmsg.ConfigResourceTypeTopic:
			for _, topic := range st.Topics() {
				add(t, topic.Name)
			}
		}
	}
	return &Reply{Msg: resp}, nil
}
