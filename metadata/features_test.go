package metadata

import (
	"errors"
	"strings"
	"testing"
)

// TestUpdateFeatures: Kafka's rules for finalized feature levels, applied
// all or none.
func TestUpdateFeatures(t *testing.T) {
	supported := []FeatureRange{
		{Name: "transaction.version", Min: 0, Max: 2, DefaultLevel: 2},
		{Name: "group.version", Min: 0, Max: 1, DefaultLevel: 1},
		{Name: "x.version", Min: 1, Max: 3, DefaultLevel: 0},
	}
	st := newState()
	if got := st.FeatureLevel("transaction.version", 2); got != 2 {
		t.Fatalf("a feature never recorded: level %d, want the default 2", got)
	}
	if st.FeaturesEpoch() != 0 {
		t.Fatalf("epoch %d before any change", st.FeaturesEpoch())
	}
	refused := func(updates ...FeatureUpdate) {
		t.Helper()
		s := st.clone()
		_, err := (&UpdateFeatures{Updates: updates, Supported: supported}).apply(s, 9)
		if !errors.Is(err, ErrInvalidUpdateVersion) {
			t.Fatalf("%+v: %v, want ErrInvalidUpdateVersion", updates, err)
		}
	}
	refused(FeatureUpdate{Name: "no.such.feature", Level: 1, Upgrade: FeatureUpgrade})
	refused(FeatureUpdate{Name: "transaction.version", Level: 3, Upgrade: FeatureUpgrade})
	refused(FeatureUpdate{Name: "transaction.version", Level: -1, Upgrade: FeatureSafeDowngrade})
	refused(FeatureUpdate{Name: "transaction.version", Level: 1, Upgrade: FeatureUpgrade}) // down without a downgrade type
	refused(FeatureUpdate{Name: "transaction.version", Level: 1, Upgrade: 0})
	refused(FeatureUpdate{Name: "transaction.version", Level: 1, Upgrade: 4})
	refused(FeatureUpdate{Name: "x.version", Level: 1, Upgrade: FeatureSafeDowngrade}) // up with a downgrade type
	// One bad update refuses the others with it.
	refused(FeatureUpdate{Name: "group.version", Level: 0, Upgrade: FeatureSafeDowngrade},
		FeatureUpdate{Name: "x.version", Level: 4, Upgrade: FeatureUpgrade})
	if got := st.FeatureLevel("group.version", 1); got != 1 {
		t.Fatalf("group.version %d after refused updates", got)
	}
	if _, err := (&UpdateFeatures{Supported: supported}).apply(st.clone(), 9); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("no updates: %v", err)
	}

	// Down to 0 (out of use) and another up, in one command.
	mustApply(t, st, &UpdateFeatures{Supported: supported, Updates: []FeatureUpdate{
		{Name: "transaction.version", Level: 0, Upgrade: FeatureUnsafeDowngrade},
		{Name: "x.version", Level: 3, Upgrade: FeatureUpgrade}}}, 40)
	if a, b := st.FeatureLevel("transaction.version", 2), st.FeatureLevel("x.version", 0); a != 0 || b != 3 {
		t.Fatalf("levels %d, %d; want 0, 3", a, b)
	}
	if st.FeaturesEpoch() != 40 {
		t.Fatalf("epoch %d, want 40 (the command's index)", st.FeaturesEpoch())
	}
	// The same level again is no change of direction: accepted as an upgrade.
	mustApply(t, st, &UpdateFeatures{Supported: supported, Updates: []FeatureUpdate{{Name: "x.version", Level: 3, Upgrade: FeatureUpgrade}}}, 41)
	// Up again from 0.
	mustApply(t, st, &UpdateFeatures{Supported: supported, Updates: []FeatureUpdate{{Name: "transaction.version", Level: 2, Upgrade: FeatureUpgrade}}}, 42)
	if got := st.FeatureLevel("transaction.version", 0); got != 2 {
		t.Fatalf("transaction.version %d, want 2", got)
	}
	// Levels survive a snapshot.
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if back.FeatureLevel("x.version", 0) != 3 || back.FeaturesEpoch() != 42 {
		t.Fatalf("after a snapshot: x.version %d epoch %d", back.FeatureLevel("x.version", 0), back.FeaturesEpoch())
	}
	// A binary that does not know the command skips it (ignorable).
	enc := EncodeCommand(&UpdateFeatures{Supported: supported, Updates: []FeatureUpdate{{Name: "x.version", Level: 3, Upgrade: FeatureUpgrade}}})
	if enc[1]&flagIgnorable == 0 {
		t.Fatal("UpdateFeatures is not flagged ignorable")
	}
}

// TestUpdateFeaturesEveryBroker: a level some registered broker does not
// serve is refused, naming it; ranges recorded for an older incarnation do
// not count (the baseline does), nor do they for a broker that recorded
// none.
func TestUpdateFeaturesEveryBroker(t *testing.T) {
	supported := []FeatureRange{
		{Name: "transaction.version", Min: 0, Max: 3, DefaultLevel: 2},
		{Name: "new.version", Min: 0, Max: 1, DefaultLevel: 0},
	}
	st := newState()
	inc1, inc2 := NewUUID(), NewUUID()
	mustApply(t, st, &RegisterBroker{BrokerID: 1, IncarnationID: inc1, PreviousBrokerEpoch: -1}, 1)
	mustApply(t, st, &RegisterBroker{BrokerID: 2, IncarnationID: inc2, PreviousBrokerEpoch: -1}, 2)
	mustApply(t, st, &BrokerFeatures{BrokerID: 1, IncarnationID: inc1, Supported: []FeatureRange{{Name: "transaction.version", Max: 3}, {Name: "new.version", Max: 1}}}, 3)
	mustApply(t, st, &BrokerFeatures{BrokerID: 2, IncarnationID: inc2, Supported: []FeatureRange{{Name: "transaction.version", Max: 2}}}, 4)
	check := func(name string, level int16) error {
		return CheckFeatureUpdates(st, []FeatureUpdate{{Name: name, Level: level, Upgrade: FeatureUpgrade}}, supported)
	}
	for _, tc := range []struct {
		name   string
		level  int16
		broker string // the broker named in the refusal; "" accepted
	}{
		{"transaction.version", 3, "broker 2"}, // broker 2 serves 0-2
		{"new.version", 1, "broker 2"},         // broker 2 does not know it
		{"transaction.version", 2, ""},
	} {
		err := check(tc.name, tc.level)
		if tc.broker == "" && err != nil || tc.broker != "" && (!errors.Is(err, ErrInvalidUpdateVersion) || !strings.Contains(err.Error(), tc.broker)) {
			t.Errorf("%s %d: %v, want a refusal naming %q", tc.name, tc.level, err, tc.broker)
		}
	}
	// Broker 2 restarts as a binary that records nothing: the baseline
	// (transaction.version 0-2) counts, not its old ranges.
	mustApply(t, st, &RegisterBroker{BrokerID: 2, IncarnationID: NewUUID(), PreviousBrokerEpoch: 2}, 5)
	if got := st.BrokerFeatureRanges(2); st.FeatureRangesRecorded(2) || len(got) != len(BaselineFeatures) {
		t.Fatalf("broker 2 after re-registering: %v, want the baseline", got)
	}
	if err := check("transaction.version", 3); err == nil || !strings.Contains(err.Error(), "broker 2") {
		t.Fatalf("level 3 with broker 2 at the baseline: %v", err)
	}
	// Ranges of a stale incarnation or an unknown broker are refused.
	if _, err := (&BrokerFeatures{BrokerID: 2, IncarnationID: inc2}).apply(st.clone(), 6); !errors.Is(err, ErrStaleBrokerEpoch) {
		t.Fatalf("stale incarnation: %v", err)
	}
	if _, err := (&BrokerFeatures{BrokerID: 9, IncarnationID: inc2}).apply(st.clone(), 6); !errors.Is(err, ErrUnknownBroker) {
		t.Fatalf("unknown broker: %v", err)
	}
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.BrokerFeatureRanges(1); len(got) != 2 || got[1].Name != "transaction.version" || got[1].Max != 3 {
		t.Fatalf("broker 1's ranges after a snapshot: %+v", got)
	}
	// Broker 2 is decommissioned (UnregisterBroker): it no longer blocks the
	// upgrade, and its recorded ranges go with it.
	mustApply(t, st, &UnregisterBroker{BrokerID: 2}, 7)
	if err := check("transaction.version", 3); err != nil {
		t.Fatalf("level 3 after unregistering broker 2: %v", err)
	}
	if _, ok := st.brokerConfigs[brokerFeaturesKey(2)]; ok {
		t.Fatal("broker 2's feature ranges outlive its registration")
	}
}
