package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// TestPartitionsPerRequestCap: a CreateTopics whose topics together ask for
// more than 10 000 partitions, or a CreatePartitions adding more than that,
// is refused whole with POLICY_VIOLATION, as Kafka's controller does
// (KAFKA-17870, KAFKA-19673), validate_only too; 10 000 are allowed. Before,
// one request created 100 000 partitions, which the broker then opened (an
// admin review).
func TestPartitionsPerRequestCap(t *testing.T) {
	b := startBroker(t, "")
	cl := newClient(t, b)
	ctx := testCtx(t)
	create := func(validate bool, counts ...int32) *kmsg.CreateTopicsResponse {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.ValidateOnly = validate
		for i, n := range counts {
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = string(rune('a'+i)), n, 1
			req.Topics = append(req.Topics, ct)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, validate := range []bool{true, false} {
		for _, rt := range create(validate, 6000, 4000, 1).Topics {
			if rt.ErrorCode != kerr.PolicyViolation.Code || rt.ErrorMessage == nil || *rt.ErrorMessage != "Excessively large number of partitions per request." {
				t.Errorf("validate_only %v, topic %s of 10 001 partitions in one request: %v %v, want POLICY_VIOLATION", validate, rt.Topic, kerr.ErrorForCode(rt.ErrorCode), rt.ErrorMessage)
			}
		}
	}
	if _, ok := b.meta.State().Topic("a"); ok {
		t.Fatal("a refused request created a topic")
	}
	for _, rt := range create(true, 6000, 4000).Topics {
		if rt.ErrorCode != 0 {
			t.Errorf("validate_only, topic %s of 10 000 partitions in one request: %v", rt.Topic, kerr.ErrorForCode(rt.ErrorCode))
		}
	}

	if rt := create(false, 1).Topics[0]; rt.ErrorCode != 0 {
		t.Fatalf("create a: %v", kerr.ErrorForCode(rt.ErrorCode))
	}
	grow := kmsg.NewPtrCreatePartitionsRequest()
	grow.ValidateOnly = true
	gt := kmsg.NewCreatePartitionsRequestTopic()
	gt.Topic, gt.Count = "a", 10002
	grow.Topics = append(grow.Topics, gt)
	gresp, err := grow.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if gresp.Topics[0].ErrorCode != kerr.PolicyViolation.Code {
		t.Errorf("CreatePartitions adding 10 001: %v, want POLICY_VIOLATION", kerr.ErrorForCode(gresp.Topics[0].ErrorCode))
	}
	grow.Topics[0].Count = 10001
	if gresp, err = grow.RequestWith(ctx, cl); err != nil || gresp.Topics[0].ErrorCode != 0 {
		t.Errorf("CreatePartitions adding 10 000: %v %v", err, kerr.ErrorForCode(gresp.Topics[0].ErrorCode))
	}
}

// TestErrorMessageIsTheDetail: a response's error_message is the failure's
// detail on one line, as Kafka's: not kerr's long description of the code,
// not the lines errors.Join makes, not the packages' prefixes (an admin
// review: "INVALID_REQUEST: This most likely occurs because of a request
// being malformed…" and "metadata: invalid request\nnull value…").
func TestErrorMessageIsTheDetail(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.Join(metadata.ErrInvalidRequest, errors.New("null value not supported for: retention.ms")), "invalid request: null value not supported for: retention.ms"},
		{fmt.Errorf("%w: the only valid name for the CLUSTER resource is kafka-cluster", kerr.InvalidRequest), "the only valid name for the CLUSTER resource is kafka-cluster"},
		{kerr.InvalidRequest, "INVALID_REQUEST"},
		{fmt.Errorf("%w: topic x", errUnknownTopicOrPartition), "unknown topic or partition: topic x"},
		{errTooManyPartitionsPerRequest, "Excessively large number of partitions per request."},
	} {
		got := errMessage(c.err)
		if *got != c.want || strings.Contains(*got, "\n") {
			t.Errorf("errMessage(%q) = %q, want %q", c.err, *got, c.want)
		}
	}
}

// TestDescribeGroupsAuthorizedOpsOfMissingGroup: a group that is not found
// carries no authorized operations (Kafka fills them only for a group
// answered without error); it carried every group operation, READ
// included, to a user who holds only DELETE on it (an admin review).
func TestDescribeGroupsAuthorizedOpsOfMissingGroup(t *testing.T) {
	z := startAuthzBroker(t, false)
	bob := z.user("bob")
	z.grant(kadm.NewACLs().Allow("User:bob").Groups("gone").Operations(kadm.OpDelete))
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{"gone"}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(context.Background(), bob)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.Groups[0]
	if g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("code %v, want GROUP_ID_NOT_FOUND", kerr.ErrorForCode(g.ErrorCode))
	}
	if g.AuthorizedOperations != math.MinInt32 {
		t.Errorf("authorized operations of a missing group: %b, want none (MinInt32); bit %d (READ) says bob may read it", g.AuthorizedOperations, kmsg.ACLOperationRead)
	}
}

// TestOffsetDeleteUnknownTopic: OffsetDelete of a topic or partition that
// does not exist answers UNKNOWN_TOPIC_OR_PARTITION for it, as Kafka's
// KafkaApis.handleOffsetDeleteRequest; it answered no error (an admin
// review).
func TestOffsetDeleteUnknownTopic(t *testing.T) {
	b := startBroker(t, "")
	cl := newClient(t, b)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if r, err := adm.CreateTopics(ctx, 1, 1, nil, "od"); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "od", Partition: 0, At: 0})
	if err := adm.CommitAllOffsets(ctx, "odg", os); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = "odg"
	for _, tp := range []struct {
		topic string
		part  int32
	}{{"od", 5}, {"nosuch", 0}} {
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = tp.topic
		p := kmsg.NewOffsetDeleteRequestTopicPartition()
		p.Partition = tp.part
		rt.Partitions = append(rt.Partitions, p)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("%s-%d: %v, want UNKNOWN_TOPIC_OR_PARTITION", rt.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
}
