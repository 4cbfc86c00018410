package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/metadata"
)

// TestMetadataLevelGate: while a registered broker has not recorded the
// metadata level a change needs (a binary from before it, in a rolling
// upgrade), the change is refused with UNSUPPORTED_VERSION instead of
// written: an older broker's state machine refused a client quota the newer
// ones applied, skipped a feature level change, and stopped at a tiered
// topic's deletion, and the brokers' states parted for good (a rolling
// upgrade review). Changes every binary applies go on; once the broker
// records the level (here: it is upgraded), the gated change is made.
func TestMetadataLevelGate(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	self := b.cfg.NodeID
	testutil.WaitFor(t, 30*time.Second, "this broker's metadata level recorded", func() bool {
		return b.meta.State().BrokerLevel(self) == metadata.MetadataLevel
	})
	quota := func() error {
		t.Helper()
		res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
			Entity: []kadm.ClientQuotaEntityComponent{{Type: "client-id", Name: kadm.StringPtr("gated")}},
			Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1 << 20}},
		}})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	if err := quota(); err != nil {
		t.Fatalf("a client quota with every broker at level %d: %v", metadata.MetadataLevel, err)
	}

	// An older broker registers (it records no feature ranges).
	old := self + 1
	incarnation := metadata.NewUUID()
	mustPropose(t, b, &metadata.RegisterBroker{BrokerID: old, IncarnationID: incarnation, PreviousBrokerEpoch: -1,
		Listeners: []metadata.Listener{{Name: "PLAINTEXT", Host: "127.0.0.1", Port: 1}}})
	if lvl, who := b.meta.State().LowestLevel(); lvl != 0 || who != old {
		t.Fatalf("lowest level %d of broker %d, want 0 of broker %d", lvl, who, old)
	}
	if err := quota(); !errors.Is(err, kerr.UnsupportedVersion) {
		t.Fatalf("a client quota with broker %d at level 0: %v, want UNSUPPORTED_VERSION", old, err)
	}
	feat := kmsg.NewPtrUpdateFeaturesRequest()
	fu := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	fu.Feature, fu.MaxVersionLevel, fu.UpgradeType = featureGroupVersion, 1, 1
	feat.FeatureUpdates = append(feat.FeatureUpdates, fu)
	resp, err := feat.RequestWith(ctx, newClient(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.ErrorCode; code != kerr.UnsupportedVersion.Code {
		t.Fatalf("UpdateFeatures with broker %d at level 0: %v, want UNSUPPORTED_VERSION", old, kerr.ErrorForCode(code))
	}
	// Topics are not gated: every binary applies their entries.
	createTopic(t, b, "still-works", 1, nil)
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("1000")}}, "still-works"); err != nil {
		t.Fatal(err)
	}

	// Upgraded, it records the level: the change is made.
	mustPropose(t, b, &metadata.BrokerFeatures{BrokerID: old, IncarnationID: incarnation,
		Supported: []metadata.FeatureRange{{Name: metadata.MetadataLevelFeature, Min: 0, Max: metadata.MetadataLevel}}})
	if err := quota(); err != nil {
		t.Fatalf("a client quota once broker %d records level %d: %v", old, metadata.MetadataLevel, err)
	}
}
