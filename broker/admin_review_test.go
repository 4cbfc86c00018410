package broker

import (
	"crypto/rand"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTopicConfigValueSpacesApplied: a topic config value with spaces
// around it (or a boolean in upper case) is valid in Kafka, whose ConfigDef
// trims before it parses, and takes effect. It must not be accepted and
// then ignored: max.message.bytes " 2000 " set by CreateTopics, by
// IncrementalAlterConfigs and by AlterConfigs refuses a 4000-byte record,
// and DescribeConfigs reports the value as parsed.
func TestTopicConfigValueSpacesApplied(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	cl := newClient(t, b, kgo.RecordRetries(0))
	adm := kadm.NewClient(cl)
	produce := func(topic string) error {
		v := make([]byte, 4000)
		rand.Read(v) // incompressible
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr()
	}
	describe := func(topic, name string) string {
		t.Helper()
		rc, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil || rc[0].Err != nil {
			t.Fatalf("describe %s: %v %v", topic, err, rc)
		}
		for _, c := range rc[0].Configs {
			if c.Key == name && c.Value != nil {
				return *c.Value
			}
		}
		t.Fatalf("%s: no %s", topic, name)
		return ""
	}
	spaced, upper := " 2000 ", "TRUE"
	createTopic(t, b, "spaced-create", 1, map[string]*string{"max.message.bytes": &spaced, "preallocate": &upper})
	if err := produce("spaced-create"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("created with max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}
	if v := describe("spaced-create", "max.message.bytes"); v != "2000" {
		t.Errorf("max.message.bytes described as %q, want 2000", v)
	}
	if v := describe("spaced-create", "preallocate"); v != "true" {
		t.Errorf("preallocate described as %q, want true", v)
	}

	createTopic(t, b, "spaced-incr", 1, nil)
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &spaced}}, "spaced-incr")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, rs)
	}
	if err := produce("spaced-incr"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("altered (incremental) to max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}

	createTopic(t, b, "spaced-legacy", 1, nil)
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &spaced}}, "spaced-legacy")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v %v", err, rs)
	}
	if err := produce("spaced-legacy"); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("altered (legacy) to max.message.bytes %q: a 4000-byte record: %v, want MESSAGE_TOO_LARGE", spaced, err)
	}
}
