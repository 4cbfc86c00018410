package broker

import (
	"context"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// DescribeShareGroupOffsets: v0-1
//
// KIP-932: each share-partition's start offset (SPSO) as the metadata log
// has it (share_partition.go writes it as it moves), answered by the
// group's coordinator (kafka-share-groups.sh --describe, Admin's
// listShareGroupOffsets). Topics null: every partition with a start offset.
// v1's lag is the high watermark minus the start offset where this broker
// has a replica of the partition, else -1.

func init() { regKey(90, 0, 1).handler = handleDescribeShareGroupOffsets }

func handleDescribeShareGroupOffsets(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	st := b.meta.State()
	for _, g := range req.Groups {
		rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		rg.GroupID = g.GroupID
		if !b.shares.coord.coordinates(g.GroupID) {
			rg.ErrorCode = kerr.NotCoordinator.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		stored := st.ShareState(g.GroupID)
		topics := g.Topics
		if topics == nil {
			topics = storedShareTopics(st, stored)
		}
		for _, t := range topics {
			rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			rt.Topic = t.Topic
			topic, ok := st.Topic(t.Topic)
			if ok {
				rt.TopicID = [16]byte(topic.ID)
			}
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				rp.Partition, rp.StartOffset, rp.LeaderEpoch, rp.Lag = p, -1, -1, -1
				switch {
				case !ok || p < 0 || int(p) >= len(topic.Partitions):
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				default:
					key := sharePartKey{g.GroupID, [16]byte(topic.ID), p}
					if v, ok := parseShareState(stored[key.stateKey()]); ok {
						rp.StartOffset = v.start
						rp.LeaderEpoch = topic.Partitions[p].LeaderEpoch
						if part := b.store.opened(topic.ID, p); part != nil {
							// Not done: past the end, and in flight below it.
							rp.Lag = max(part.log.HighWatermark()-v.end, 0) + v.inFlight()
						}
					}
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return &Reply{Msg: resp}, nil
}

// storedShareTopics lists the topics and partitions a share group has start
// offsets for, by topic name.
func storedShareTopics(st *metadata.State, stored map[string]string) []kmsg.DescribeShareGroupOffsetsRequestGroupTopic {
	byName := map[string][]int32{}
	for k := range stored {
		idHex, part, ok := strings.Cut(k, ":")
		id, err := hex.DecodeString(idHex)
		p, err2 := strconv.ParseInt(part, 10, 32)
		if !ok || err != nil || err2 != nil || len(id) != 16 {
			continue
		}
		if t, ok := st.TopicByID(metadata.UUID(id)); ok {
			byName[t.Name] = append(byName[t.Name], int32(p))
		}
	}
	var out []kmsg.DescribeShareGroupOffsetsRequestGroupTopic
	for name, parts := range byName {
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		out = append(out, kmsg.DescribeShareGroupOffsetsRequestGroupTopic{Topic: name, Partitions: parts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}
