package metadata

import (
	"bytes"
	"testing"
	"time"
)

// seedCommands has one of every command, with most fields set.
func seedCommands() []Command {
	id := nameUUID("topic")
	return []Command{
		&SetClusterID{ClusterID: "c"},
		&RegisterBroker{BrokerID: 1, IncarnationID: nameUUID("inc"), Listeners: []Listener{{Name: "P", Host: "h", Port: 9092, SecurityProtocol: 1}}, Rack: "r", PreviousBrokerEpoch: -1, NowMs: 5},
		&BrokerHeartbeat{BrokerID: 1, BrokerEpoch: 1, NowMs: 6, WantFenced: true},
		&FenceBroker{BrokerID: 1, BrokerEpoch: -1},
		&UnfenceBroker{BrokerID: 1, BrokerEpoch: 1},
		&ControlledShutdown{BrokerID: 1, BrokerEpoch: 1},
		&CreateTopic{Name: "topic", TopicID: id, NumPartitions: 2, ReplicationFactor: 1, Configs: map[string]string{"a": "b"}, Assignment: [][]int32{{1}, {1}}},
		&DeleteTopic{TopicID: id, Name: "topic"},
		&DeleteTopic{TopicID: id, Name: "topic", DeleteRemote: true},
		&RemoteTopicDeleted{TopicID: id},
		&CreatePartitions{TopicID: id, Count: 3, Assignment: [][]int32{{1}}},
		&AlterConfigs{ResourceType: ResourceTopic, ResourceName: "topic", Replace: true, Ops: []ConfigOp{{Key: "k", Value: "v"}, {Key: "d", Delete: true}}},
		&ChangeLeaderAndISR{TopicID: id, Partition: 0, LeaderEpoch: 0, PartitionEpoch: 0, Leader: 1, ISR: []int32{1}},
		&ChangeLeaderAndISR{TopicID: id, Partition: 0, LeaderEpoch: 2, PartitionEpoch: 3, Leader: 1, ISR: []int32{1, 2}, BrokerEpochs: []int64{-1, 7}},
		&ChangeLeaderAndISR{TopicID: id, Partition: 1, LeaderEpoch: 0, PartitionEpoch: 0, Leader: 1, ISR: []int32{1}, Unclean: true},
		&CommitRemoteLog{TopicID: id, Partition: 0, ExpectedManifestVersion: 0, ManifestKey: "m", StartOffset: 0, EndOffset: 10},
		&CommitRemoteLog{TopicID: id, Partition: 0, ExpectedManifestVersion: 1, ManifestKey: "m2", StartOffset: 5, EndOffset: 5, DeleteRemoteLog: true},
		&AllocateProducerIDs{BrokerID: 1, BrokerEpoch: 1, Count: 10},
		&AcquireLease{Kind: "k", Resource: "r", Holder: "h", NowMs: 1, TTLMs: 10},
		&RenewLease{Kind: "k", Resource: "r", Holder: "h", Token: 1, NowMs: 2, TTLMs: 10},
		&ReleaseLease{Kind: "k", Resource: "r", Holder: "h", Token: 1},
		&AlterReassignment{TopicID: id, Partition: 1, Target: []int32{1}},
		&BrokerFeatures{BrokerID: 1, IncarnationID: nameUUID("inc"), Supported: []FeatureRange{{Name: "f.version", Max: 2}}},
		&UpdateFeatures{Updates: []FeatureUpdate{{Name: "f.version", Level: 1, Upgrade: FeatureUpgrade}},
			Supported: []FeatureRange{{Name: "f.version", Min: 0, Max: 2, DefaultLevel: 0}}},
	}
}

// seedState applies every seed command, giving a state with one of each thing.
func seedState(t testing.TB) *State {
	s := newState()
	for i, c := range seedCommands() {
		if _, ok := c.(*DeleteTopic); ok {
			continue
		}
		next := s.clone()
		if _, err := c.apply(next, uint64(i+1)); err == nil {
			s = next
		}
	}
	if s.NumPartitions() == 0 {
		t.Fatalf("seed state has no partitions:\n%s", s)
	}
	return s
}

// FuzzDecodeCommand: any bytes decode to a command or an error, never a panic
// or an unbounded allocation; a decoded command re-encodes to bytes that
// decode to the same encoding, and applying it to a populated state either
// rejects it or yields a state that survives a snapshot round trip.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range seedCommands() {
		f.Add(EncodeCommand(c))
	}
	f.Add([]byte{0xfe, 0x81})
	base := seedState(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := DecodeCommand(data)
		if err != nil {
			return
		}
		enc := EncodeCommand(cmd)
		again, err := DecodeCommand(enc)
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if !bytes.Equal(EncodeCommand(again), enc) {
			t.Fatal("encoding not stable")
		}
		next := base.clone()
		if _, err := cmd.apply(next, 100); err != nil {
			return
		}
		back, err := DecodeSnapshot(EncodeSnapshot(next))
		if err != nil {
			t.Fatalf("state after %s does not snapshot: %v", cmd.Type(), err)
		}
		if back.String() != next.String() {
			t.Fatal("snapshot round trip differs")
		}
	})
}

// FuzzDecodeSnapshot: any bytes decode to a state or ErrCorruptSnapshot; a
// decoded state re-encodes to a snapshot that decodes to the same state.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(EncodeSnapshot(newState()))
	f.Add(EncodeSnapshot(seedState(f)))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		back, err := DecodeSnapshot(EncodeSnapshot(st))
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if back.String() != st.String() {
			t.Fatal("snapshot round trip differs")
		}
	})
}

// FuzzDecodeSnapshotBody fuzzes the body behind a valid header and checksum,
// which random bytes would almost never reach.
func FuzzDecodeSnapshotBody(f *testing.F) {
	for _, s := range []*State{newState(), seedState(f)} {
		enc := EncodeSnapshot(s)
		f.Add(enc[len(snapshotMagic)+1 : len(enc)-4])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e := encoder{}
		e.buf = append(e.buf, snapshotMagic...)
		e.u8(snapshotVersion)
		e.buf = append(e.buf, body...)
		e.u32(crc32c(e.buf))
		st, err := DecodeSnapshot(e.buf)
		if err != nil {
			return
		}
		// A decodable state must be safe to use: run the controller on it.
		_, _ = planLeadership(st, 1<<40, func(int32) int64 { return 0 }, rebalance{enabled: true, intervalMs: 1, percentage: 10}, 1)
		back, err := DecodeSnapshot(EncodeSnapshot(st))
		if err != nil || back.String() != st.String() {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzForward decodes forward-protocol requests (what a peer sends to a
// node's Raft port after the 'F' byte), answers to op 5, and forward
// responses' Results: no panic, and whatever decodes encodes back to bytes
// that decode the same.
func FuzzForward(f *testing.F) {
	for _, r := range []forwardRequest{
		{op: opPropose, timeout: 5 * time.Second, command: EncodeCommand(&CreateTopic{Name: "t", NumPartitions: 1, ReplicationFactor: 1})},
		{op: opReadIndex, timeout: time.Second},
		{op: opAddVoter, id: 4, addr: "127.0.0.1:9093"},
		{op: opRemoveVoter, id: 2},
		{op: opIdentify, id: 1},
		{op: opAddObserver, id: 7, addr: "broker7:9093"},
		{op: opRemoveObserver, id: 7},
	} {
		f.Add(r.encode())
	}
	f.Add([]byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeForward(b)
		if err == nil {
			again, err := decodeForward(r.encode())
			if err != nil || again.op != r.op || again.timeout != r.timeout || again.id != r.id || again.addr != r.addr || string(again.command) != string(r.command) {
				t.Fatalf("%+v encodes to a request that decodes as %+v, %v", r, again, err)
			}
		}
		_, _ = decodeIdentity(b)
		var res Result
		d := decoder{buf: b}
		res.decode(&d)
	})
}
