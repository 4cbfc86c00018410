package metadata

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The metadata level gate. A binary writes some entries in encodings, or
// with contents, that older binaries cannot apply: an older node's state
// machine either stops at them (a new encoding) or refuses them where a
// newer node applies them (a resource type it does not know), and the
// nodes' states part for good, snapshots included (a rolling-upgrade
// review: a client quota applied on the new brokers only, a feature level
// changed on some, an old broker stopped at a tiered topic's deletion while
// the controller gave it leaderships). Kafka gates such records on the
// finalized metadata.version; here every broker records, among its feature
// ranges (BrokerFeatures), the highest metadata level it reads, and an
// entry that needs a level is proposed only while every registered broker
// has recorded at least that level. A broker that recorded none (a binary
// from before the gate) is at level 0.

// MetadataLevelFeature names the metadata level among a broker's recorded
// feature ranges. It is not a finalized feature: clients never see it.
const MetadataLevelFeature = "sediment.metadata.version"

// MetadataLevel is the highest level this binary reads. Level 1: DeleteTopic
// v2 (a tiered topic's bucket deletion), CommitRemoteLog v4 (a remote log
// cut back), UpdateFeatures, and AlterConfigs of consumer groups, SCRAM
// users, client quotas, ACLs and delegation tokens.
const MetadataLevel int16 = 1

// ErrUpgradeInProgress: an entry needs a metadata level some registered
// broker has not recorded (UNSUPPORTED_VERSION, as Kafka answers for what
// its metadata.version does not support yet).
var ErrUpgradeInProgress = errors.New("metadata: a registered broker runs an older binary")

// levelWait is how long a proposal waits for every registered broker to
// record its level before it is refused: a broker just registered records
// its feature ranges a moment later.
const levelWait = 3 * time.Second

// RequiredLevel is the metadata level every registered broker must read
// for c to be proposed.
func RequiredLevel(c Command) int16 {
	switch c := c.(type) {
	case *DeleteTopic:
		if c.DeleteRemote {
			return 1
		}
	case *CommitRemoteLog:
		if c.TruncateRemoteLog {
			return 1
		}
	case *UpdateFeatures:
		return 1
	case *AlterConfigs:
		switch c.ResourceType {
		case ResourceGroup, ResourceUser, ResourceClientQuota, ResourceACL, ResourceDelegationToken:
			return 1
		}
	}
	return 0
}

// BrokerLevel is the metadata level broker id recorded for its current
// registration; 0 if it recorded none.
func (s *State) BrokerLevel(id int32) int16 {
	if !s.FeatureRangesRecorded(id) {
		return 0
	}
	_, hi, _ := strings.Cut(s.brokerConfigs[brokerFeaturesKey(id)][MetadataLevelFeature], "-")
	n, err := strconv.ParseInt(hi, 10, 16)
	if err != nil {
		return 0
	}
	return int16(n)
}

// LowestLevel is the lowest metadata level of the registered brokers, with
// such a broker (MetadataLevel and -1 when none is registered).
func (s *State) LowestLevel() (int16, int32) {
	level, who := MetadataLevel, int32(-1)
	for _, b := range s.Brokers() {
		if l := s.BrokerLevel(b.ID); l < level {
			level, who = l, b.ID
		}
	}
	return level, who
}

// brokersBelow lists the registered brokers below level need.
func (s *State) brokersBelow(need int16) []int32 {
	var out []int32
	for _, b := range s.Brokers() {
		if s.BrokerLevel(b.ID) < need {
			out = append(out, b.ID)
		}
	}
	return out
}

// awaitLevel returns once every registered broker reads level need, or
// ErrUpgradeInProgress after levelWait (or the context's end).
func (n *Node) awaitLevel(ctx context.Context, need int16) error {
	ctx, cancel := context.WithTimeout(ctx, levelWait)
	defer cancel()
	for {
		st := n.State()
		if level, _ := st.LowestLevel(); level >= need {
			return nil
		}
		if _, err := n.WaitForVersion(ctx, st.Version+1); err != nil {
			// A broker below may run a newer binary that could not
			// record its level yet (an older metadata leader cannot
			// take the record): it does within seconds of a newer one.
			return reject(ErrUpgradeInProgress, "brokers %v have not recorded metadata level %d (an older binary, or an upgraded one whose record an older metadata leader refused): this change needs it; finish the rolling upgrade first", st.brokersBelow(need), need)
		}
	}
}
