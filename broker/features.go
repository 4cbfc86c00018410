package broker

import (
	"github.com/sediment-io/sediment/metadata"
)

// Feature levels (KIP-584, KIP-1022). The broker serves these features;
// the level in force for each is the one the cluster recorded with
// UpdateFeatures (metadata.UpdateFeatures), or its default while none was:
//
//   - transaction.version 0-2, default 2 (0 with Transactions.ClassicOnly):
//     at 2 ApiVersions tells clients to use KIP-890 part 2's flow (Produce
//     v12+ adds partitions, EndTxn v5 bumps the epoch); below it they use
//     AddPartitionsToTxn and AddOffsetsToTxn. The coordinator serves both.
//   - group.version 0-1, default 1: at 1 KIP-848 consumer groups are served;
//     at 0 ConsumerGroupHeartbeat and ConsumerGroupDescribe answer
//     UNSUPPORTED_VERSION, as Kafka does (franz-go falls back to the classic
//     protocol by itself; the Java consumer must be set to group.protocol=classic).
const (
	featureTransactionVersion = "transaction.version"
	featureGroupVersion       = "group.version"
)

// supportedFeatures lists the features this broker serves, with their
// defaults (sorted by name: ApiVersions lists them in this order).
func (b *Broker) supportedFeatures() []metadata.FeatureRange {
	txnDefault := int16(2)
	if b.cfg.Transactions.ClassicOnly {
		txnDefault = 0
	}
	return []metadata.FeatureRange{
		{Name: featureGroupVersion, Min: 0, Max: 1, DefaultLevel: 1},
		{Name: featureTransactionVersion, Min: 0, Max: 2, DefaultLevel: txnDefault},
	}
}

// featureLevel is the level of a feature this broker serves in st.
func (b *Broker) featureLevel(st *metadata.State, name string) int16 {
	for _, f := range b.supportedFeatures() {
		if f.Name == name {
			return st.FeatureLevel(name, f.DefaultLevel)
		}
	}
	return 0
}

// consumerGroupsEnabled: KIP-848 groups are served (group.version >= 1).
func (b *Broker) consumerGroupsEnabled() bool {
	return b.featureLevel(b.meta.State(), featureGroupVersion) >= 1
}
