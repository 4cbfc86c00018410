package metadata

import (
	"reflect"
	"testing"
)

// TestChangeLeaderAndISRVersions: without broker epochs the command is
// written at version 1, which binaries from before KIP-841's check decode;
// with them at version 2; an explicit unclean election (ElectLeaders type 1)
// at version 3. All decode back to what was encoded.
func TestChangeLeaderAndISRVersions(t *testing.T) {
	id := UUID{1, 2, 3}
	for _, tc := range []struct {
		cmd     *ChangeLeaderAndISR
		version uint8
	}{
		{&ChangeLeaderAndISR{TopicID: id, Partition: 2, LeaderEpoch: 3, PartitionEpoch: 4, Leader: 1, ISR: []int32{1, 2}}, 1},
		{&ChangeLeaderAndISR{TopicID: id, Partition: 2, LeaderEpoch: 3, PartitionEpoch: 4, Leader: 1, ISR: []int32{1, 2},
			BrokerEpochs: []int64{-1, 42}}, 2},
		{&ChangeLeaderAndISR{TopicID: id, Partition: 2, LeaderEpoch: 3, PartitionEpoch: 4, Leader: 1, ISR: []int32{1}, Unclean: true}, 3},
		{&ChangeLeaderAndISR{TopicID: id, Partition: 2, LeaderEpoch: 3, PartitionEpoch: 4, Leader: 1, ISR: []int32{1},
			BrokerEpochs: []int64{-1}, Unclean: true}, 3},
	} {
		checkVersionRoundTrip(t, tc.cmd, tc.version)
	}
}

// TestCommitRemoteLogVersions: a commit that does not delete the remote log
// is written at version 2, which binaries from before KIP-950's deletion
// decode; a deletion at version 3. Both decode back to what was encoded.
func TestCommitRemoteLogVersions(t *testing.T) {
	id := UUID{1, 2, 3}
	for _, tc := range []struct {
		cmd     *CommitRemoteLog
		version uint8
	}{
		{&CommitRemoteLog{TopicID: id, Partition: 1, LeaderEpoch: 2, ExpectedManifestVersion: 3, ManifestKey: "m", StartOffset: 4, EndOffset: 9}, 2},
		{&CommitRemoteLog{TopicID: id, Partition: 1, LeaderEpoch: 2, ExpectedManifestVersion: 3, ManifestKey: "m", StartOffset: 4, EndOffset: 9,
			Lease: LeaseFence{Kind: "retention", Resource: "t-1", Holder: "b1", Token: 7}, NowMs: 11}, 2},
		{&CommitRemoteLog{TopicID: id, Partition: 1, LeaderEpoch: 2, ExpectedManifestVersion: 3, ManifestKey: "m", StartOffset: 6, EndOffset: 6,
			Lease: LeaseFence{Kind: "retention", Resource: "t-1", Holder: "b1", Token: 7}, NowMs: 11, DeleteRemoteLog: true}, 3},
		{&CommitRemoteLog{TopicID: id, Partition: 1, LeaderEpoch: 2, ExpectedManifestVersion: 3, ManifestKey: "m", StartOffset: 4, EndOffset: 6,
			TruncateRemoteLog: true}, 4},
	} {
		checkVersionRoundTrip(t, tc.cmd, tc.version)
	}
}

// checkVersionRoundTrip: cmd is written at version and decodes back to
// itself.
func checkVersionRoundTrip(t *testing.T, cmd Command, version uint8) {
	t.Helper()
	b := EncodeCommand(cmd)
	if got := b[1] &^ flagIgnorable; got != version {
		t.Fatalf("%+v written at version %d, want %d", cmd, got, version)
	}
	back, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cmd) {
		t.Fatalf("round trip: %+v, want %+v", back, cmd)
	}
}
