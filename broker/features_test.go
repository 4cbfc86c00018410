package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sediment-io/sediment/broker/group"
	"github.com/sediment-io/sediment/broker/txn"
)

// kversionsUpTo is the stable versions with key capped at v.
func kversionsUpTo(key, v int16) *kversion.Versions {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(key, v)
	return vs
}

// apiVersionsFeatures asks b for ApiVersions at version v and returns the
// supported ranges ("min-max"), the finalized levels and their epoch.
func apiVersionsFeatures(t *testing.T, b *Broker, v int16) (supported map[string][2]int16, finalized map[string]int16, epoch int64) {
	t.Helper()
	cl := newClient(t, b, kgo.MaxVersions(kversionsUpTo(18, v)))
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "sediment-test", "1"
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version != v {
		t.Fatalf("ApiVersions answered at v%d, want v%d", resp.Version, v)
	}
	supported, finalized = map[string][2]int16{}, map[string]int16{}
	for _, f := range resp.SupportedFeatures {
		supported[f.Name] = [2]int16{f.MinVersion, f.MaxVersion}
	}
	for _, f := range resp.FinalizedFeatures {
		if f.MinVersionLevel != f.MaxVersionLevel {
			t.Fatalf("finalized %s: levels %d-%d", f.Name, f.MinVersionLevel, f.MaxVersionLevel)
		}
		finalized[f.Name] = f.MaxVersionLevel
	}
	return supported, finalized, resp.FinalizedFeaturesEpoch
}

// TestApiVersionsFeatures: v4 lists the supported features and the
// finalized levels; v3 leaves out every supported range that starts at 0
// (Java clients before 3.9 fail on one, KAFKA-17492) but keeps the
// finalized levels; a feature at level 0 is not finalized.
func TestApiVersionsFeatures(t *testing.T) {
	b := startBroker(t, "")
	sup, fin, epoch := apiVersionsFeatures(t, b, 4)
	if want := map[string][2]int16{"transaction.version": {0, 2}, "group.version": {0, 1}}; !maps.Equal(sup, want) {
		t.Fatalf("v4 supported %v, want %v", sup, want)
	}
	if want := map[string]int16{"transaction.version": 2, "group.version": 1}; !maps.Equal(fin, want) {
		t.Fatalf("v4 finalized %v, want %v", fin, want)
	}
	if epoch != 0 {
		t.Fatalf("epoch %d before any update, want 0", epoch)
	}
	sup, fin, _ = apiVersionsFeatures(t, b, 3)
	if len(sup) != 0 || len(fin) != 2 {
		t.Fatalf("v3: supported %v (want none: every range starts at 0), finalized %v", sup, fin)
	}

	classic := startBroker(t, "", func(c *Config) { c.Transactions.ClassicOnly = true })
	if _, fin, _ := apiVersionsFeatures(t, classic, 4); !maps.Equal(fin, map[string]int16{"group.version": 1}) {
		t.Fatalf("ClassicOnly: finalized %v, want transaction.version left out (level 0)", fin)
	}
}

// TestUpdateFeatures: UpdateFeatures through kadm and raw requests at every
// version: Kafka's refusals (INVALID_UPDATE_VERSION for the whole request),
// validate-only, downgrades, and the effect of the levels on real clients:
// franz-go keeps the classic transaction flow under transaction.version 1,
// and falls back to a classic group under group.version 0.
func TestUpdateFeatures(t *testing.T) {
	b := startBroker(t, "", func(c *Config) {
		c.Groups = group.Config{Partitions: 4, InitialRebalanceDelay: 100 * time.Millisecond, MinSessionTimeout: time.Second,
			ConsumerHeartbeatInterval: 200 * time.Millisecond}
		c.Transactions = txn.Config{Partitions: 4, AbortInterval: 100 * time.Millisecond}
	})
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))

	raw := func(v int16, validateOnly bool, updates ...kmsg.UpdateFeaturesRequestFeatureUpdate) *kmsg.UpdateFeaturesResponse {
		t.Helper()
		cl := newClient(t, b, kgo.MaxVersions(kversionsUpTo(57, v)))
		req := kmsg.NewPtrUpdateFeaturesRequest()
		req.ValidateOnly, req.FeatureUpdates = validateOnly, updates
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version != v {
			t.Fatalf("answered at v%d, want v%d", resp.Version, v)
		}
		return resp
	}
	update := func(name string, level int16, upgradeType int8, allowDowngrade bool) kmsg.UpdateFeaturesRequestFeatureUpdate {
		u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
		u.Feature, u.MaxVersionLevel, u.UpgradeType, u.AllowDowngrade = name, level, upgradeType, allowDowngrade
		return u
	}
	invalid := kerr.InvalidUpdateVersion.Code
	// The broker records what its registration serves, and the metadata
	// level it reads (metadata/gate.go).
	waitCond(t, func() bool {
		st := b.meta.State()
		return st.FeatureRangesRecorded(b.cfg.NodeID) && fmt.Sprint(st.BrokerFeatureRanges(b.cfg.NodeID)) == "[{group.version 0 1 0} {sediment.metadata.version 0 1 0} {transaction.version 0 2 0}]"
	})

	// Refusals, at each version; v0-1 repeat the error per feature.
	for v := int16(0); v <= 2; v++ {
		resp := raw(v, false, update("sarama.unsupported.feature", 1, 1, false), update("group.version", 1, 1, false))
		if resp.ErrorCode != invalid {
			t.Fatalf("v%d unknown feature: error %d, want INVALID_UPDATE_VERSION", v, resp.ErrorCode)
		}
		if v <= 1 && (len(resp.Results) != 2 || resp.Results[0].ErrorCode != invalid || resp.Results[1].ErrorCode != invalid) {
			t.Fatalf("v%d results %+v", v, resp.Results)
		}
		if v == 2 && len(resp.Results) != 0 {
			t.Fatalf("v2 has results: %+v", resp.Results)
		}
	}
	for _, tc := range []struct {
		name string
		v    int16
		u    kmsg.UpdateFeaturesRequestFeatureUpdate
	}{
		{"above the range", 1, update("transaction.version", 3, 1, false)},
		{"down as an upgrade", 1, update("transaction.version", 1, 1, false)},
		{"down without AllowDowngrade (v0)", 0, update("transaction.version", 1, 0, false)},
		{"unknown upgrade type", 1, update("transaction.version", 1, 0, false)},
		{"a negative level", 1, update("transaction.version", -1, 3, false)},
	} {
		if resp := raw(tc.v, false, tc.u); resp.ErrorCode != invalid {
			t.Fatalf("%s: error %d, want INVALID_UPDATE_VERSION", tc.name, resp.ErrorCode)
		}
	}
	// No updates: a success that changes nothing, as Kafka's controller.
	if resp := raw(1, false); resp.ErrorCode != 0 || len(resp.Results) != 0 {
		t.Fatalf("no updates: %+v", resp)
	}
	// Validate-only checks and changes nothing.
	if resp := raw(1, true, update("transaction.version", 1, 2, false)); resp.ErrorCode != 0 {
		t.Fatalf("validate-only downgrade: %d", resp.ErrorCode)
	}
	if resp := raw(1, true, update("transaction.version", 1, 1, false)); resp.ErrorCode != invalid {
		t.Fatalf("validate-only bad downgrade: %d", resp.ErrorCode)
	}
	if _, fin, epoch := apiVersionsFeatures(t, b, 4); fin["transaction.version"] != 2 || epoch != 0 {
		t.Fatalf("after refusals and validate-only: finalized %v epoch %d", fin, epoch)
	}

	// transaction.version 1 (a safe downgrade, through kadm): a new
	// franz-go producer uses the classic flow, whose epoch stays put across
	// transactions (under 2 every EndTxn bumps it).
	res, err := adm.UpdateFeatures(ctx, false, kadm.FeatureUpdate{Feature: "transaction.version", MaxVersionLevel: 1, UpgradeType: 2})
	if err != nil || res.Error() != nil {
		t.Fatalf("downgrade transaction.version: %v %v", err, res.Error())
	}
	_, fin, epoch := apiVersionsFeatures(t, b, 4)
	if fin["transaction.version"] != 1 || epoch <= 0 {
		t.Fatalf("after the downgrade: finalized %v epoch %d", fin, epoch)
	}
	createTopic(t, b, "feat-txn", 1, nil)
	epochsAcross := func(id string) (int16, int16) {
		cl := txnClient(t, b, id)
		produceTxn(t, cl, "feat-txn", 0, true, "a")
		_, e0, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		produceTxn(t, cl, "feat-txn", 0, true, "b")
		_, e1, _ := cl.ProducerID(ctx)
		return e0, e1
	}
	if e0, e1 := epochsAcross("feat-classic"); e0 != e1 {
		t.Fatalf("transaction.version 1: epoch %d -> %d, want the classic flow (no bump)", e0, e1)
	}
	// And back up (v0's AllowDowngrade false is an upgrade): KIP-890 again.
	if resp := raw(0, false, update("transaction.version", 2, 0, false)); resp.ErrorCode != 0 {
		t.Fatalf("upgrade transaction.version: %d %v", resp.ErrorCode, resp.ErrorMessage)
	}
	_, fin, epoch2 := apiVersionsFeatures(t, b, 4)
	if fin["transaction.version"] != 2 || epoch2 <= epoch {
		t.Fatalf("after the upgrade: finalized %v epoch %d (was %d)", fin, epoch2, epoch)
	}
	if e0, e1 := epochsAcross("feat-890"); e0 == e1 {
		t.Fatalf("transaction.version 2: epoch stayed %d, want a bump per transaction", e0)
	}

	// group.version 0: ConsumerGroupHeartbeat is UNSUPPORTED_VERSION, and a
	// franz-go consumer asking for KIP-848 joins a classic group instead.
	if resp := raw(2, false, update("group.version", 0, 3, false)); resp.ErrorCode != 0 {
		t.Fatalf("group.version 0: %d %v", resp.ErrorCode, resp.ErrorMessage)
	}
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = "feat-g", "m1", 0, 5000
	hb.SubscribedTopicNames = []string{"feat-txn"}
	if resp, err := hb.RequestWith(ctx, newClient(t, b)); err != nil || resp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("ConsumerGroupHeartbeat under group.version 0: %v %+v", err, resp)
	}
	cons := newClient(t, b, kgo.ConsumerGroup("feat-g"), kgo.ConsumeTopics("feat-txn"), kgo.ServerSideBalancer(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got := 0; got < 4; {
		fs := cons.PollFetches(pctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume in a group under group.version 0: %v", err)
		}
		got += fs.NumRecords()
	}
	lg, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := lg["feat-g"]; !ok || g.ProtocolType != "consumer" {
		t.Fatalf("group feat-g under group.version 0: %+v (listed %v)", g, ok)
	}
	dg, err := adm.DescribeGroups(ctx, "feat-g")
	if err != nil || dg["feat-g"].Err != nil || dg["feat-g"].State != "Stable" {
		t.Fatalf("the classic group: %v %+v", err, dg["feat-g"])
	}
}

// TestUpdateFeaturesAuthorization: UpdateFeatures needs ALTER on the
// cluster.
func TestUpdateFeaturesAuthorization(t *testing.T) {
	z := startAuthzBroker(t, false)
	setUser(t, z.b, "ops", "ops-pw", kadm.ScramSha256)
	ops := secureClient(t, z.b, nil, "SASL_PLAINTEXT", scram.Auth{User: "ops", Pass: "ops-pw"}.AsSha256Mechanism())
	up := kadm.FeatureUpdate{Feature: "transaction.version", MaxVersionLevel: 1, UpgradeType: 2}
	if _, err := kadm.NewClient(ops).UpdateFeatures(testCtx(t), false, up); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("without ALTER on the cluster: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	z.grant(kadm.NewACLs().Clusters().Allow("User:ops").Operations(kadm.OpAlter))
	if res, err := kadm.NewClient(ops).UpdateFeatures(testCtx(t), false, up); err != nil || res.Error() != nil {
		t.Fatalf("with ALTER on the cluster: %v %v", err, res.Error())
	}
}

// TestUnregisterBrokerAuthorization: UnregisterBroker needs ALTER on the
// cluster; an id that is not registered is BROKER_ID_NOT_REGISTERED.
func TestUnregisterBrokerAuthorization(t *testing.T) {
	z := startAuthzBroker(t, false)
	setUser(t, z.b, "ops", "ops-pw", kadm.ScramSha256)
	ops := secureClient(t, z.b, nil, "SASL_PLAINTEXT", scram.Auth{User: "ops", Pass: "ops-pw"}.AsSha256Mechanism())
	unregister := func(id int32) int16 {
		req := kmsg.NewPtrUnregisterBrokerRequest()
		req.BrokerID = id
		resp, err := req.RequestWith(testCtx(t), ops)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	if code := unregister(42); code != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("without ALTER on the cluster: %v, want CLUSTER_AUTHORIZATION_FAILED", kerr.ErrorForCode(code))
	}
	z.grant(kadm.NewACLs().Clusters().Allow("User:ops").Operations(kadm.OpAlter))
	if code := unregister(42); code != kerr.BrokerIDNotRegistered.Code {
		t.Fatalf("an id never registered: %v, want BROKER_ID_NOT_REGISTERED", kerr.ErrorForCode(code))
	}
}
