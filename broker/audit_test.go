package broker

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/internal/testutil"
)

// TestAdminAuditLog: requests that change the cluster are logged once
// answered, with the client and each resource's outcome (refusals too);
// validate-only ones at debug; secret config values hidden; reads are not
// logged.
func TestAdminAuditLog(t *testing.T) {
	var logs testutil.Buffer
	b := startBroker(t, "", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	adm := kadm.NewClient(newClient(t, b, kgo.ClientID("ops-tool")))
	ctx := testCtx(t)
	mustOK := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := adm.CreateTopic(ctx, 2, 1, nil, "audited")
	mustOK(err)
	if _, err = adm.CreateTopic(ctx, 2, 1, nil, "audited"); err == nil {
		t.Fatal("created twice")
	}
	_, err = adm.ValidateCreateTopics(ctx, 1, 1, nil, "validated")
	mustOK(err)
	_, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("3600000")}}, "audited")
	mustOK(err)
	_, err = adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "listener.name.plain.ssl.keystore.password", Value: kadm.StringPtr("s3cret")}})
	_ = err                                          // refused or not, it is logged without its value
	_, err = adm.CreatePartitions(ctx, 3, "audited") // 3 more
	mustOK(err)
	_, err = adm.ListTopics(ctx) // a read: not logged
	mustOK(err)
	_, err = adm.DeleteTopics(ctx, "audited")
	mustOK(err)

	out := logs.String()
	for _, want := range [][]string{
		{`msg="admin: CreateTopics"`, "audited (id ", "2 partitions, replication factor 1): OK", "principal=User:ANONYMOUS", "client_id=ops-tool", "remote=127.0.0.1:"},
		{`msg="admin: CreateTopics"`, "audited (id AAAAAAAAAAAAAAAAAAAAAA, -1 partitions, replication factor -1): TOPIC_ALREADY_EXISTS"},
		{`msg="admin: IncrementalAlterConfigs"`, "TOPIC audited: retention.ms set 3600000: OK"},
		{`msg="admin: IncrementalAlterConfigs"`, "BROKER <default>: listener.name.plain.ssl.keystore.password set [hidden]"},
		{`msg="admin: CreatePartitions"`, "audited to 5 partitions: OK"},
		{`msg="admin: DeleteTopics"`, "audited (id ", "): OK"},
	} {
		if !testutil.LogHasLine(out, want...) {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}
	for _, no := range []string{"validated", "s3cret", "Metadata"} {
		if strings.Contains(out, no) {
			t.Errorf("%q logged at INFO:\n%s", no, out)
		}
	}
}

// TestAuditLineBounded: the audit line of a request with very many entries
// keeps its first ~16 KiB and counts the rest; a CreateTopics of 1.3
// million entries made a line of 111 MB (protocol review).
func TestAuditLineBounded(t *testing.T) {
	req := kmsg.NewPtrCreateTopicsRequest()
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for i := range 100_000 {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic = fmt.Sprintf("topic-%d", i)
		req.Topics = append(req.Topics, rt)
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		resp.Topics = append(resp.Topics, st)
	}
	line, _ := auditSummaries[req.Key()](req, resp)
	if len(line) > maxAuditLine+1024 || !strings.HasSuffix(line, " more") || !strings.HasPrefix(line, "topic-0") {
		t.Fatalf("audit line of %d bytes: %.80s … %s", len(line), line, line[max(0, len(line)-40):])
	}
}
