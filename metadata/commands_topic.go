package metadata

import (
	"strconv"
)

// MaxPartitionsPerCommand bounds the partitions one CreateTopic or
// CreatePartitions adds, so that a request cannot make the controller
// allocate without bound.
const MaxPartitionsPerCommand = 100_000

func init() {
	register(TypeCreateTopic, commandInfo{name: "CreateTopic", version: 1, decode: func(_ uint8, d *decoder) Command {
		c := &CreateTopic{Name: d.str(), TopicID: d.uuid(), NumPartitions: d.int32(), ReplicationFactor: d.int32(), Configs: d.strMap()}
		c.Assignment = decodeAssignment(d)
		return c
	}})
	register(TypeDeleteTopic, commandInfo{name: "DeleteTopic", version: 2, decode: func(v uint8, d *decoder) Command {
		c := &DeleteTopic{TopicID: d.uuid(), Name: d.str()}
		if v >= 2 {
			c.DeleteRemote = d.bool()
		}
		return c
	}})
	register(TypeCreatePartitions, commandInfo{name: "CreatePartitions", version: 1, decode: func(_ uint8, d *decoder) Command {
		c := &CreatePartitions{TopicID: d.uuid(), Name: d.str(), Count: d.int32()}
		c.Assignment = decodeAssignment(d)
		return c
	}})
	register(TypeAlterConfigs, commandInfo{name: "AlterConfigs", version: 1, decode: func(_ uint8, d *decoder) Command {
		c := &AlterConfigs{ResourceType: ResourceType(d.int32()), ResourceName: d.str(), Replace: d.bool()}
		n := d.count(3)
		for range n {
			c.Ops = append(c.Ops, ConfigOp{Key: d.str(), Value: d.str(), Delete: d.bool()})
		}
		return c
	}})
	register(TypeChangeLeaderAndISR, commandInfo{name: "ChangeLeaderAndISR", version: 3, decode: func(v uint8, d *decoder) Command {
		c := &ChangeLeaderAndISR{TopicID: d.uuid(), Partition: d.int32(), LeaderEpoch: d.int32(), PartitionEpoch: d.int32(), Leader: d.int32(), ISR: d.int32s()}
		if v >= 2 {
			n := d.count(1)
			for range n {
				c.BrokerEpochs = append(c.BrokerEpochs, d.varint())
			}
		}
		if v >= 3 {
			c.Unclean = d.bool()
		}
		return c
	}})
	register(TypeCommitRemoteLog, commandInfo{name: "CommitRemoteLog", version: 4, decode: func(v uint8, d *decoder) Command {
		c := &CommitRemoteLog{TopicID: d.uuid(), Partition: d.int32(), LeaderEpoch: d.int32(), ExpectedManifestVersion: d.varint(),
			ManifestKey: d.str(), StartOffset: d.varint(), EndOffset: d.varint()}
		if v >= 2 {
			c.Lease = LeaseFence{Kind: d.str(), Resource: d.str(), Holder: d.str(), Token: d.uvarint()}
			c.NowMs = d.varint()
		}
		if v >= 3 {
			c.DeleteRemoteLog = d.bool()
		}
		if v >= 4 {
			c.TruncateRemoteLog = d.bool()
		}
		return c
	}})
}

func encodeAssignment(e *encoder, a [][]int32) {
	e.uvarint(uint64(len(a)))
	for _, r := range a {
		e.int32s(r)
	}
}

func decodeAssignment(d *decoder) [][]int32 {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	a := make([][]int32, n)
	for i := range a {
		a[i] = d.int32s()
	}
	return a
}

// CreateTopic creates a topic. The proposer (the controller on the leader)
// fills TopicID with a random UUID and Assignment from NumPartitions and
// ReplicationFactor when they are empty; the FSM only checks them. Names are
// validated by the broker; the FSM refuses duplicates.
type CreateTopic struct {
	Name              string
	TopicID           UUID
	NumPartitions     int32 // -1: num.partitions (cluster config) or 1
	ReplicationFactor int32 // -1: default.replication.factor or 1
	Configs           map[string]string
	Assignment        [][]int32 // replicas per partition; [0] is preferred
}

func (*CreateTopic) Type() CommandType { return TypeCreateTopic }
func (c *CreateTopic) encode(e *encoder) {
	e.str(c.Name)
	e.uuid(c.TopicID)
	e.varint(int64(c.NumPartitions))
	e.varint(int64(c.ReplicationFactor))
	e.strMap(c.Configs)
	encodeAssignment(e, c.Assignment)
}

func (c *CreateTopic) prepare(p *prepareContext) error {
	if _, ok := p.st.Topic(c.Name); ok {
		return reject(ErrTopicExists, "topic %q", c.Name)
	}
	// Checked when the leader prepares the creation, as Kafka's
	// controller does, not in apply: a log written before the check
	// replays as it was.
	if other, ok := p.st.TopicCollision(c.Name); ok {
		return reject(ErrInvalidTopic, "topic %q collides with existing topic %q", c.Name, other)
	}
	if c.TopicID.IsZero() {
		c.TopicID = NewUUID()
	}
	if len(c.Assignment) > 0 {
		return nil
	}
	n, rf := c.NumPartitions, c.ReplicationFactor
	if n == -1 {
		n = clusterInt(p.st, ConfigNumPartitions, 1)
	}
	if rf == -1 {
		rf = clusterInt(p.st, ConfigDefaultReplication, 1)
	}
	a, err := assignReplicas(p.st, nil, 0, n, rf, p.rotation)
	if err != nil {
		return err
	}
	c.Assignment = a
	return nil
}

func (c *CreateTopic) apply(s *State, _ uint64) (Result, error) {
	if c.Name == "" {
		return Result{}, reject(ErrInvalidRequest, "empty topic name")
	}
	if _, ok := s.Topic(c.Name); ok {
		return Result{}, reject(ErrTopicExists, "topic %q", c.Name)
	}
	if c.TopicID.IsZero() {
		return Result{}, reject(ErrInvalidRequest, "zero topic id")
	}
	if _, ok := s.TopicByID(c.TopicID); ok {
		return Result{}, reject(ErrTopicExists, "topic id %s", c.TopicID)
	}
	if s.RemoteDeletionPending(c.TopicID) {
		// Its bucket objects are still being deleted under this id.
		return Result{}, reject(ErrTopicExists, "topic id %s: a deleted topic's remote data", c.TopicID)
	}
	if len(c.Assignment) == 0 || len(c.Assignment) > MaxPartitionsPerCommand {
		return Result{}, reject(ErrInvalidPartitions, "topic %q with %d partitions", c.Name, len(c.Assignment))
	}
	if err := checkAssignment(s, c.Assignment, len(c.Assignment[0])); err != nil {
		return Result{}, err
	}
	t := &Topic{ID: c.TopicID, Name: c.Name, Configs: copyMap(c.Configs)}
	t.Partitions = newPartitions(s, t, 0, c.Assignment)
	s.putTopic(t)
	s.partitions += len(t.Partitions)
	return Result{TopicID: t.ID}, nil
}

// checkAssignment checks that every replica list has rf distinct registered
// brokers.
func checkAssignment(s *State, a [][]int32, rf int) error {
	if rf <= 0 {
		return reject(ErrInvalidReplicationFactor, "replication factor %d", rf)
	}
	for i, replicas := range a {
		if len(replicas) != rf {
			return reject(ErrInvalidReplicaAssignment, "partition %d has %d replicas, want %d", i, len(replicas), rf)
		}
		for j, r := range replicas {
			if _, ok := s.Broker(r); !ok {
				return reject(ErrInvalidReplicaAssignment, "partition %d: broker %d not registered", i, r)
			}
			if contains(replicas[:j], r) {
				return reject(ErrInvalidReplicaAssignment, "partition %d: broker %d twice", i, r)
			}
		}
	}
	return nil
}

// newPartitions builds partitions from an assignment: the ISR is the eligible
// replicas (all of them if none is, as a new log is empty everywhere), the
// leader the first eligible one.
func newPartitions(s *State, t *Topic, first int, a [][]int32) []*Partition {
	ps := make([]*Partition, 0, len(a))
	for i, replicas := range a {
		p := &Partition{Index: int32(first + i), Replicas: append([]int32(nil), replicas...), Leader: NoLeader}
		for _, r := range replicas {
			if eligible(s, r) {
				p.ISR = append(p.ISR, r)
			}
		}
		if len(p.ISR) == 0 {
			p.ISR = append([]int32(nil), replicas...)
		} else {
			p.Leader = p.ISR[0]
		}
		ps = append(ps, p)
	}
	return ps
}

// DeleteTopic deletes a topic by id, or by name when TopicID is zero. With
// DeleteRemote (version 2) it also records, in the same entry, that the
// topic's objects in the bucket (tiered storage) are still to be deleted
// (State.RemoteDeletions), until a RemoteTopicDeleted removes the record.
type DeleteTopic struct {
	TopicID      UUID
	Name         string
	DeleteRemote bool
}

func (*DeleteTopic) Type() CommandType { return TypeDeleteTopic }
func (c *DeleteTopic) encode(e *encoder) {
	e.uuid(c.TopicID)
	e.str(c.Name)
	if c.encodeVersion() >= 2 {
		e.bool(c.DeleteRemote)
	}
}

// encodeVersion is 1 (what binaries before tiered topic deletion decode)
// unless DeleteRemote is set.
func (c *DeleteTopic) encodeVersion() uint8 {
	if c.DeleteRemote {
		return 2
	}
	return 1
}

func (c *DeleteTopic) apply(s *State, _ uint64) (Result, error) {
	t, err := findTopic(s, c.TopicID, c.Name)
	if err != nil {
		return Result{}, err
	}
	s.topics = s.topics.Delete(string(t.ID[:]))
	s.names = s.names.Delete(t.Name)
	s.partitions -= len(t.Partitions)
	if c.DeleteRemote || hasRemoteLog(t) {
		// Also a v1 entry (a binary from before DeleteRemote, during a
		// rolling upgrade) of a topic whose remote log committed data:
		// its objects are in the bucket, and without the record nobody
		// deleted them (a review: every object of such a topic left for
		// good).
		setRemoteDeletion(s, t.ID, int32(len(t.Partitions)))
	}
	return Result{TopicID: t.ID}, nil
}

// hasRemoteLog reports whether any of t's partitions committed a manifest.
func hasRemoteLog(t *Topic) bool {
	for _, p := range t.Partitions {
		if p.Remote.ManifestVersion > 0 {
			return true
		}
	}
	return false
}

func findTopic(s *State, id UUID, name string) (*Topic, error) {
	if !id.IsZero() {
		if t, ok := s.TopicByID(id); ok {
			return t, nil
		}
		return nil, reject(ErrUnknownTopic, "topic id %s", id)
	}
	if t, ok := s.Topic(name); ok {
		return t, nil
	}
	return nil, reject(ErrUnknownTopic, "topic %q", name)
}

// CreatePartitions raises a topic's partition count to Count. The proposer
// fills Assignment (replicas of the new partitions only) when it is empty,
// with the topic's replication factor.
type CreatePartitions struct {
	TopicID    UUID // or Name when zero
	Name       string
	Count      int32
	Assignment [][]int32
}

func (*CreatePartitions) Type() CommandType { return TypeCreatePartitions }
func (c *CreatePartitions) encode(e *encoder) {
	e.uuid(c.TopicID)
	e.str(c.Name)
	e.varint(int64(c.Count))
	encodeAssignment(e, c.Assignment)
}

func (c *CreatePartitions) prepare(p *prepareContext) error {
	if len(c.Assignment) > 0 {
		return nil
	}
	t, err := findTopic(p.st, c.TopicID, c.Name)
	if err != nil {
		return err
	}
	cur := int32(len(t.Partitions))
	if c.Count <= cur {
		return reject(ErrInvalidPartitions, "topic %q has %d partitions, asked for %d", t.Name, cur, c.Count)
	}
	a, err := assignReplicas(p.st, t.Partitions, cur, c.Count-cur, int32(len(t.Partitions[0].Replicas)), p.rotation)
	if err != nil {
		return err
	}
	c.Assignment = a
	return nil
}

func (c *CreatePartitions) apply(s *State, _ uint64) (Result, error) {
	t, err := findTopic(s, c.TopicID, c.Name)
	if err != nil {
		return Result{}, err
	}
	cur := len(t.Partitions)
	if int(c.Count) <= cur {
		return Result{}, reject(ErrInvalidPartitions, "topic %q has %d partitions, asked for %d", t.Name, cur, c.Count)
	}
	if int(c.Count)-cur > MaxPartitionsPerCommand {
		return Result{}, reject(ErrInvalidPartitions, "%d new partitions, at most %d at once", int(c.Count)-cur, MaxPartitionsPerCommand)
	}
	if len(c.Assignment) != int(c.Count)-cur {
		return Result{}, reject(ErrInvalidReplicaAssignment, "%d new partitions, %d assignments", int(c.Count)-cur, len(c.Assignment))
	}
	if err := checkAssignment(s, c.Assignment, len(t.Partitions[0].Replicas)); err != nil {
		return Result{}, err
	}
	nt := copyTopic(t)
	nt.Partitions = append(nt.Partitions, newPartitions(s, t, cur, c.Assignment)...)
	s.putTopic(nt)
	s.partitions += len(c.Assignment)
	return Result{TopicID: t.ID}, nil
}

// ConfigOp sets (or, with Delete, removes) one config.
type ConfigOp struct {
	Key    string
	Value  string
	Delete bool
}

// AlterConfigs changes the dynamic configs of a topic, a broker, or (broker
// with the empty name) the cluster. With Replace the resource's configs are
// first cleared (Kafka's non-incremental AlterConfigs). Keys and values are
// validated by the broker.
type AlterConfigs struct {
	ResourceType ResourceType
	ResourceName string
	Replace      bool
	Ops          []ConfigOp
}

func (*AlterConfigs) Type() CommandType { return TypeAlterConfigs }
func (c *AlterConfigs) encode(e *encoder) {
	e.varint(int64(c.ResourceType))
	e.str(c.ResourceName)
	e.bool(c.Replace)
	e.uvarint(uint64(len(c.Ops)))
	for _, op := range c.Ops {
		e.str(op.Key)
		e.str(op.Value)
		e.bool(op.Delete)
	}
}

func (c *AlterConfigs) apply(s *State, _ uint64) (Result, error) {
	for _, op := range c.Ops {
		if op.Key == "" {
			return Result{}, reject(ErrInvalidRequest, "empty config name")
		}
	}
	change := func(old map[string]string) map[string]string {
		m := map[string]string{}
		if !c.Replace {
			for k, v := range old {
				m[k] = v
			}
		}
		for _, op := range c.Ops {
			if op.Delete {
				delete(m, op.Key)
			} else {
				m[op.Key] = op.Value
			}
		}
		return m
	}
	if c.ResourceType == ResourceTopic {
		t, ok := s.Topic(c.ResourceName)
		if !ok {
			return Result{}, reject(ErrUnknownTopic, "topic %q", c.ResourceName)
		}
		nt := *t
		nt.Configs = change(t.Configs)
		s.putTopic(&nt)
		return Result{TopicID: t.ID}, nil
	}
	// The other resources share one map (brokerConfigs), each under a key
	// of its own form; the snapshot format stays as it is.
	var key string
	switch c.ResourceType {
	case ResourceBroker:
		if c.ResourceName != "" {
			if id, err := strconv.ParseInt(c.ResourceName, 10, 32); err != nil || id < 0 {
				return Result{}, reject(ErrInvalidRequest, "broker resource %q", c.ResourceName)
			}
		}
		key = c.ResourceName
	case ResourceGroup:
		if c.ResourceName == "" {
			return Result{}, reject(ErrInvalidRequest, "empty group name")
		}
		key = groupConfigKey(c.ResourceName)
	case ResourceUser:
		if c.ResourceName == "" {
			return Result{}, reject(ErrInvalidRequest, "empty user name")
		}
		key = userConfigKey(c.ResourceName)
	case ResourceShareState:
		if c.ResourceName == "" {
			return Result{}, reject(ErrInvalidRequest, "empty share group name")
		}
		key = shareStateKey(c.ResourceName)
	case ResourceDelegationToken:
		// The fields are the broker's (broker/delegation_tokens.go).
		if c.ResourceName == "" {
			return Result{}, reject(ErrInvalidRequest, "empty delegation token id")
		}
		key = tokenConfigKeyPrefix + c.ResourceName
	case ResourceClientQuota:
		// The entity string, keys and values are the broker's
		// (broker/quota_entity.go); only an empty name is refused here.
		if c.ResourceName == "" {
			return Result{}, reject(ErrInvalidRequest, "empty client quota entity")
		}
		key = quotaConfigKey(c.ResourceName)
	case ResourceACL:
		// The broker validates ACLs (broker/acl.go); only what the
		// stored form cannot hold is refused here.
		if _, _, _, ok := parseACLPattern(c.ResourceName); !ok {
			return Result{}, reject(ErrInvalidRequest, "ACL pattern %q", c.ResourceName)
		}
		for _, op := range c.Ops {
			if _, _, _, _, ok := parseACLEntry(op.Key); !ok || op.Value != "" {
				return Result{}, reject(ErrInvalidRequest, "ACL entry %q", op.Key)
			}
		}
		key = aclConfigKeyPrefix + c.ResourceName
	default:
		return Result{}, reject(ErrInvalidRequest, "resource type %d", c.ResourceType)
	}
	bc := make(map[string]map[string]string, len(s.brokerConfigs)+1)
	for k, v := range s.brokerConfigs {
		bc[k] = v
	}
	if m := change(s.brokerConfigs[key]); len(m) > 0 {
		bc[key] = m
	} else {
		delete(bc, key)
	}
	s.brokerConfigs = bc
	if c.ResourceType == ResourceACL {
		s.acls = buildACLSet(bc)
	}
	return Result{}, nil
}

// ChangeLeaderAndISR sets a partition's leader and ISR (Kafka's AlterPartition,
// and the controller's elections). It is refused with ErrStaleEpoch unless
// LeaderEpoch and PartitionEpoch are the partition's current ones. A new
// leader must be eligible and in the new ISR, and come from the current ISR
// unless the topic allows unclean election or Unclean is set; brokers added
// to the ISR must be
// eligible. The leader epoch grows when the leader changes; the partition
// epoch on any change.
//
// BrokerEpochs (version 2; KIP-841), if set, runs parallel to ISR: for a
// broker that joins the ISR, the broker epoch of the incarnation whose
// fetches the leader judged caught up (-1: not checked). The change is
// refused with ErrIneligibleReplica unless that is the broker's current
// registration: a follower that restarted meanwhile (perhaps with a shorter
// log) is not added on the strength of its previous incarnation's fetches.
//
// Unclean (version 3) is an unclean election asked for explicitly
// (ElectLeaders, election type 1): for a partition without a leader, a
// leader from outside the ISR is accepted whatever the topic's
// unclean.leader.election.enable, and the ISR must then be that leader alone
// (Kafka's ReplicationControlManager.electLeader runs an UNCLEAN election
// when asked).
type ChangeLeaderAndISR struct {
	TopicID        UUID
	Partition      int32
	LeaderEpoch    int32
	PartitionEpoch int32
	Leader         int32 // may be NoLeader
	ISR            []int32
	BrokerEpochs   []int64 // version 2: nil, or len(ISR) entries
	Unclean        bool    // version 3
}

func (*ChangeLeaderAndISR) Type() CommandType { return TypeChangeLeaderAndISR }
func (c *ChangeLeaderAndISR) encode(e *encoder) {
	e.uuid(c.TopicID)
	e.varint(int64(c.Partition))
	e.varint(int64(c.LeaderEpoch))
	e.varint(int64(c.PartitionEpoch))
	e.varint(int64(c.Leader))
	e.int32s(c.ISR)
	if c.encodeVersion() >= 2 {
		e.uvarint(uint64(len(c.BrokerEpochs)))
		for _, be := range c.BrokerEpochs {
			e.varint(be)
		}
	}
	if c.encodeVersion() >= 3 {
		e.bool(c.Unclean)
	}
}

// encodeVersion is the oldest version that holds the fields set: 1 (what
// binaries before KIP-841's check decode) unless BrokerEpochs is set (2) or
// Unclean (3), so that ISR changes and the controller's elections stay
// readable by older binaries during a rolling upgrade.
func (c *ChangeLeaderAndISR) encodeVersion() uint8 {
	switch {
	case c.Unclean:
		return 3
	case len(c.BrokerEpochs) > 0:
		return 2
	}
	return 1
}

func (c *ChangeLeaderAndISR) apply(s *State, _ uint64) (Result, error) {
	t, p, err := findPartition(s, c.TopicID, c.Partition)
	if err != nil {
		return Result{}, err
	}
	if c.LeaderEpoch != p.LeaderEpoch || c.PartitionEpoch != p.PartitionEpoch {
		return Result{}, reject(ErrStaleEpoch, "%s-%d: epochs %d/%d, current %d/%d", t.Name, p.Index, c.LeaderEpoch, c.PartitionEpoch, p.LeaderEpoch, p.PartitionEpoch)
	}
	if len(c.ISR) == 0 {
		return Result{}, reject(ErrInvalidRequest, "%s-%d: empty ISR", t.Name, p.Index)
	}
	if len(c.BrokerEpochs) != 0 && len(c.BrokerEpochs) != len(c.ISR) {
		return Result{}, reject(ErrInvalidRequest, "%s-%d: %d broker epochs for an ISR of %d", t.Name, p.Index, len(c.BrokerEpochs), len(c.ISR))
	}
	if c.Unclean {
		if p.Leader != NoLeader {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: unclean election with leader %d in place", t.Name, p.Index, p.Leader)
		}
		if c.Leader == NoLeader {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: unclean election of no leader", t.Name, p.Index)
		}
		if !contains(p.ISR, c.Leader) && !equalInt32s(c.ISR, []int32{c.Leader}) {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: unclean election of %d outside ISR %v must make the ISR [%d], not %v",
				t.Name, p.Index, c.Leader, p.ISR, c.Leader, c.ISR)
		}
	}
	for i, r := range c.ISR {
		if !contains(p.Replicas, r) {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: ISR member %d is not a replica", t.Name, p.Index, r)
		}
		if contains(c.ISR[:i], r) {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: ISR member %d twice", t.Name, p.Index, r)
		}
		if !contains(p.ISR, r) && !eligible(s, r) {
			return Result{}, reject(ErrIneligibleReplica, "%s-%d: broker %d is fenced or shutting down", t.Name, p.Index, r)
		}
		if len(c.BrokerEpochs) > 0 && c.BrokerEpochs[i] >= 0 && !contains(p.ISR, r) {
			current := int64(-1)
			if b, ok := s.Broker(r); ok {
				current = b.Epoch
			}
			if current != c.BrokerEpochs[i] {
				return Result{}, reject(ErrIneligibleReplica, "%s-%d: broker %d caught up at broker epoch %d, now registered at %d",
					t.Name, p.Index, r, c.BrokerEpochs[i], current)
			}
		}
	}
	if c.Leader != NoLeader {
		if !contains(c.ISR, c.Leader) {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: leader %d not in ISR %v", t.Name, p.Index, c.Leader, c.ISR)
		}
		if !eligible(s, c.Leader) {
			return Result{}, reject(ErrIneligibleReplica, "%s-%d: leader %d is fenced or shutting down", t.Name, p.Index, c.Leader)
		}
		if c.Leader != p.Leader && !contains(p.ISR, c.Leader) && !c.Unclean && !uncleanAllowed(s, t) {
			return Result{}, reject(ErrIneligibleReplica, "%s-%d: leader %d not in ISR %v and unclean election is off", t.Name, p.Index, c.Leader, p.ISR)
		}
	}
	np := p.clone()
	changed := false
	if c.Leader != p.Leader {
		np.Leader = c.Leader
		np.LeaderEpoch++
		changed = true
	}
	if !equalInt32s(c.ISR, p.ISR) {
		np.ISR = append([]int32(nil), c.ISR...)
		changed = true
	}
	if changed {
		np.PartitionEpoch++
		// A reassignment completes once its target replicas are in sync.
		completeReassignment(s, np)
		s.putTopic(t.withPartition(np))
	}
	return Result{TopicID: t.ID, LeaderEpoch: np.LeaderEpoch, PartitionEpoch: np.PartitionEpoch}, nil
}

func findPartition(s *State, id UUID, index int32) (*Topic, *Partition, error) {
	t, ok := s.TopicByID(id)
	if !ok {
		return nil, nil, reject(ErrUnknownTopic, "topic id %s", id)
	}
	if index < 0 || int(index) >= len(t.Partitions) {
		return nil, nil, reject(ErrUnknownPartition, "%s-%d", t.Name, index)
	}
	return t, t.Partitions[index], nil
}

// CommitRemoteLog moves a partition's remote-log pointer. It is a
// compare-and-set: refused with ErrStaleEpoch unless LeaderEpoch is the
// partition's current leader epoch (a deposed leader cannot move it), and with
// ErrManifestConflict unless ExpectedManifestVersion is the current version.
// Offsets never move backwards. The new version is the expected one plus one.
//
// A commit made under a lease (tiered compaction, remote retention: Lease.Token
// not zero) is also refused, with ErrLeaseLost, unless Lease names the lease
// on (Kind, Resource) as it stands: same holder, same fencing token, not
// expired at NowMs. A worker whose lease was taken over (or ran out while it
// was paused) can therefore not commit what it prepared under it.
type CommitRemoteLog struct {
	TopicID                 UUID
	Partition               int32
	LeaderEpoch             int32
	ExpectedManifestVersion int64
	ManifestKey             string
	StartOffset             int64
	EndOffset               int64
	// Version 2.
	Lease LeaseFence // zero: not under a lease
	NowMs int64      // set by the proposer when zero and Lease is set
	// Version 3. DeleteRemoteLog: the remote log was deleted (KIP-950,
	// remote.storage.enable turned off with remote.log.delete.on.disable):
	// the new range is empty (StartOffset == EndOffset, the leader's local
	// log start), and may end below the current end; it still never starts
	// below the current start.
	DeleteRemoteLog bool
	// Version 4. TruncateRemoteLog: the remote log is cut back to where it
	// stops being the leader's history (an unclean leader election, or a
	// leader restored from an old copy, left records of a lost history in
	// the bucket): the new end may be below the current end, never below
	// the start, which stays where it is.
	TruncateRemoteLog bool
}

// LeaseFence names the lease a command is made under.
type LeaseFence struct {
	Kind, Resource, Holder string
	Token                  uint64
}

func (*CommitRemoteLog) Type() CommandType { return TypeCommitRemoteLog }
func (c *CommitRemoteLog) encode(e *encoder) {
	e.uuid(c.TopicID)
	e.varint(int64(c.Partition))
	e.varint(int64(c.LeaderEpoch))
	e.varint(c.ExpectedManifestVersion)
	e.str(c.ManifestKey)
	e.varint(c.StartOffset)
	e.varint(c.EndOffset)
	e.str(c.Lease.Kind)
	e.str(c.Lease.Resource)
	e.str(c.Lease.Holder)
	e.uvarint(c.Lease.Token)
	e.varint(c.NowMs)
	if c.encodeVersion() >= 3 {
		e.bool(c.DeleteRemoteLog)
	}
	if c.encodeVersion() >= 4 {
		e.bool(c.TruncateRemoteLog)
	}
}

// encodeVersion is 2 (what binaries before KIP-950's remote log deletion
// decode) unless DeleteRemoteLog (3) or TruncateRemoteLog (4) is set: only
// those commits need a binary that knows them.
func (c *CommitRemoteLog) encodeVersion() uint8 {
	switch {
	case c.TruncateRemoteLog:
		return 4
	case c.DeleteRemoteLog:
		return 3
	}
	return 2
}

func (c *CommitRemoteLog) prepare(p *prepareContext) error {
	if c.NowMs == 0 && c.Lease.Token != 0 {
		c.NowMs = p.nowMs
	}
	return nil
}

func (c *CommitRemoteLog) apply(s *State, _ uint64) (Result, error) {
	t, p, err := findPartition(s, c.TopicID, c.Partition)
	if err != nil {
		return Result{}, err
	}
	if c.Lease.Token != 0 {
		l, err := heldLease(s, c.Lease.Kind, c.Lease.Resource, c.Lease.Holder, c.Lease.Token)
		if err != nil {
			return Result{}, err
		}
		if l.ExpiresMs <= c.NowMs {
			return Result{}, reject(ErrLeaseLost, "%s/%s expired at %d, now %d", c.Lease.Kind, c.Lease.Resource, l.ExpiresMs, c.NowMs)
		}
	}
	if c.LeaderEpoch != p.LeaderEpoch {
		return Result{}, reject(ErrStaleEpoch, "%s-%d: leader epoch %d, current %d", t.Name, p.Index, c.LeaderEpoch, p.LeaderEpoch)
	}
	if c.ExpectedManifestVersion != p.Remote.ManifestVersion {
		return Result{}, reject(ErrManifestConflict, "%s-%d: expected manifest version %d, current %d", t.Name, p.Index, c.ExpectedManifestVersion, p.Remote.ManifestVersion)
	}
	backwards := c.EndOffset < p.Remote.EndOffset
	if c.DeleteRemoteLog {
		if c.StartOffset != c.EndOffset {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: a deleted remote log's range [%d,%d) is not empty", t.Name, p.Index, c.StartOffset, c.EndOffset)
		}
		backwards = false
	}
	if c.TruncateRemoteLog {
		if c.DeleteRemoteLog || c.StartOffset != p.Remote.StartOffset {
			return Result{}, reject(ErrInvalidRequest, "%s-%d: a truncation of the remote log [%d,%d) moves its start to %d", t.Name, p.Index, p.Remote.StartOffset, p.Remote.EndOffset, c.StartOffset)
		}
		backwards = false
	}
	if c.StartOffset < 0 || c.StartOffset > c.EndOffset || c.StartOffset < p.Remote.StartOffset || backwards {
		return Result{}, reject(ErrInvalidRequest, "%s-%d: remote offsets [%d,%d) after [%d,%d)", t.Name, p.Index, c.StartOffset, c.EndOffset, p.Remote.StartOffset, p.Remote.EndOffset)
	}
	np := p.clone()
	np.Remote = RemoteLog{ManifestKey: c.ManifestKey, ManifestVersion: p.Remote.ManifestVersion + 1,
		StartOffset: c.StartOffset, EndOffset: c.EndOffset, LeaderEpoch: c.LeaderEpoch}
	s.putTopic(t.withPartition(np))
	return Result{TopicID: t.ID, ManifestVersion: np.Remote.ManifestVersion}, nil
}

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func equalInt32s(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func clusterInt(s *State, key string, def int32) int32 {
	if v, ok := s.brokerConfigs[""][key]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n > 0 {
			return int32(n)
		}
	}
	return def
}
