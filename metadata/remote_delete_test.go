package metadata

import (
	"errors"
	"reflect"
	"testing"
)

// TestRemoteDeletionRecords: DeleteTopic without DeleteRemote is written at
// version 1 (older binaries decode it) and records nothing; with it, version
// 2, and the same entry records the topic's id and partition count as a
// pending remote deletion, which survives a snapshot round trip, keeps the
// id from being reused by CreateTopic (a topic re-created under the same
// name gets another id and is not concerned), and is removed by
// RemoteTopicDeleted (a second one is refused: ErrUnknownTopic).
func TestRemoteDeletionRecords(t *testing.T) {
	for _, tc := range []struct {
		cmd     *DeleteTopic
		version uint8
	}{
		{&DeleteTopic{TopicID: UUID{1}, Name: "a"}, 1},
		{&DeleteTopic{TopicID: UUID{1}, Name: "a", DeleteRemote: true}, 2},
	} {
		b := EncodeCommand(tc.cmd)
		if got := b[1] &^ flagIgnorable; got != tc.version {
			t.Fatalf("%+v written at version %d, want %d", tc.cmd, got, tc.version)
		}
		back, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(back, Command(tc.cmd)) {
			t.Fatalf("round trip: %+v (%v), want %+v", back, err, tc.cmd)
		}
	}
	if b := EncodeCommand(&RemoteTopicDeleted{TopicID: UUID{1}}); b[1]&flagIgnorable == 0 {
		t.Fatal("RemoteTopicDeleted is not flagged ignorable")
	}

	st := newState()
	mustApply(t, st, &RegisterBroker{BrokerID: 1, IncarnationID: UUID{9}, NowMs: 1}, 1)
	old, kept := UUID{0xaa}, UUID{0xbb}
	mustApply(t, st, &CreateTopic{Name: "old", TopicID: old, Assignment: [][]int32{{1}, {1}, {1}}}, 2)
	mustApply(t, st, &CreateTopic{Name: "kept", TopicID: kept, Assignment: [][]int32{{1}}}, 3)
	mustApply(t, st, &DeleteTopic{Name: "kept"}, 4)
	mustApply(t, st, &DeleteTopic{Name: "old", DeleteRemote: true}, 5)
	want := []RemoteDeletion{{TopicID: old, Partitions: 3}}
	if got := st.RemoteDeletions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("pending remote deletions %+v, want %+v", got, want)
	}
	back, err := DecodeSnapshot(EncodeSnapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.RemoteDeletions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a snapshot: %+v, want %+v", got, want)
	}
	if _, err := (&CreateTopic{Name: "old", TopicID: old, Assignment: [][]int32{{1}}}).apply(st.clone(), 6); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("create with the id of a topic whose remote data is being deleted: %v", err)
	}
	mustApply(t, st, &CreateTopic{Name: "old", TopicID: UUID{0xcc}, Assignment: [][]int32{{1}}}, 6)
	if !st.RemoteDeletionPending(old) || st.RemoteDeletionPending(UUID{0xcc}) {
		t.Fatal("the re-created topic is taken for the deleted one")
	}
	mustApply(t, st, &RemoteTopicDeleted{TopicID: old}, 7)
	if got := st.RemoteDeletions(); len(got) != 0 {
		t.Fatalf("after RemoteTopicDeleted: %+v", got)
	}
	// A v1 entry (an older binary's, in a rolling upgrade) deleting a
	// topic whose remote log committed data records the deletion too:
	// its objects are in the bucket (they were left for good).
	tiered := UUID{0xdd}
	mustApply(t, st, &CreateTopic{Name: "tiered", TopicID: tiered, Assignment: [][]int32{{1}, {1}}}, 8)
	mp, _ := st.Partition(tiered, 1)
	mustApply(t, st, &CommitRemoteLog{TopicID: tiered, Partition: 1, LeaderEpoch: mp.LeaderEpoch, ManifestKey: "m/1", EndOffset: 10}, 9)
	mustApply(t, st, &DeleteTopic{Name: "tiered"}, 10)
	if got, want := st.RemoteDeletions(), []RemoteDeletion{{TopicID: tiered, Partitions: 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a v1 deletion of a topic with a remote log: pending %+v, want %+v", got, want)
	}
	if _, err := (&RemoteTopicDeleted{TopicID: old}).apply(st.clone(), 8); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("a second RemoteTopicDeleted: %v", err)
	}
}
