package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestUncleanElectionTopicConfigStoredCanonical: a topic's
// unclean.leader.election.enable given as "True" or " TRUE " is valid (Kafka
// parses booleans in any case, trimmed, and so does validateTopicConfig),
// but the metadata state machine, which runs the elections, honours only
// the exact "true" (metadata.uncleanAllowed; it cannot read it more leniently
// without voters of two versions electing differently on the same entries).
// Before the fix the value was stored as sent: DescribeConfigs showed it on
// and the controller never ran an unclean election for the topic. It must
// reach the metadata log as "true" on every path: CreateTopics,
// IncrementalAlterConfigs and the legacy AlterConfigs.
func TestUncleanElectionTopicConfigStoredCanonical(t *testing.T) {
	b := startBroker(t, "")
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	const key = "unclean.leader.election.enable"
	stored := func(topic string) string {
		t.Helper()
		tp, ok := b.meta.State().Topic(topic)
		if !ok {
			t.Fatalf("no topic %s", topic)
		}
		return tp.Configs[key]
	}

	on := "True"
	createTopic(t, b, "created", 1, map[string]*string{key: &on})
	if got := stored("created"); got != "true" {
		t.Fatalf("CreateTopics with %s=%q stored %q, want \"true\"", key, on, got)
	}

	createTopic(t, b, "incremental", 1, nil)
	on = " TRUE "
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &on}}, "incremental")
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := stored("incremental"); got != "true" {
		t.Fatalf("IncrementalAlterConfigs with %s=%q stored %q, want \"true\"", key, on, got)
	}

	createTopic(t, b, "legacy", 1, nil)
	on = "tRuE"
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: key, Value: &on}}, "legacy")
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := stored("legacy"); got != "true" {
		t.Fatalf("AlterConfigs with %s=%q stored %q, want \"true\"", key, on, got)
	}
}
