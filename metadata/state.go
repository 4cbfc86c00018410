package metadata

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/benbjohnson/immutable"
)

// UUID is a 16-byte identifier (topic ids, broker incarnations).
type UUID [16]byte

// NewUUID returns a random (version 4) UUID.
func NewUUID() UUID {
	var u UUID
	_, _ = rand.Read(u[:])
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

// IsZero reports whether u is the all-zero UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String formats u as 8-4-4-4-12 hex digits.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// NoLeader is the Leader of a partition that has none (Kafka's -1).
const NoLeader int32 = -1

// Listener is one advertised endpoint of a broker.
type Listener struct {
	Name             string
	Host             string
	Port             int32
	SecurityProtocol int16
}

// Broker is a registered broker. Values reachable from a State are shared and
// must not be modified.
type Broker struct {
	ID            int32
	IncarnationID UUID
	// Epoch is the Raft index of the registration: it changes on every
	// registration, so a heartbeat from an older process is refused.
	Epoch     int64
	Listeners []Listener
	Rack      string
	// Fenced brokers lead nothing and are in no ISR. A broker is fenced when it
	// registers and unfenced by its first heartbeat.
	Fenced               bool
	InControlledShutdown bool
	// LastHeartbeatMs is the proposer's wall clock (Unix ms) at the
	// registration or its latest heartbeat (heartbeats never move it back,
	// even when that clock stepped back). Only RegisterBroker's live-session
	// check reads it; the controller times sessions on its own monotonic
	// clock (sessionClock).
	LastHeartbeatMs int64
}

// RemoteLog is a partition's pointer into the bucket: O(1) per partition.
type RemoteLog struct {
	ManifestKey     string
	ManifestVersion int64 // 0 until the first commit; each commit adds one
	StartOffset     int64
	EndOffset       int64 // exclusive; 0 when nothing is remote
	LeaderEpoch     int32 // epoch of the leader that made the last commit
}

// Partition is one partition's replicas and leadership.
type Partition struct {
	Index          int32
	Replicas       []int32 // Replicas[0] is the preferred leader
	ISR            []int32
	Leader         int32 // NoLeader when none is eligible
	LeaderEpoch    int32 // bumped on every leader change
	PartitionEpoch int32 // bumped on every change to leader, ISR or replicas
	Remote         RemoteLog
	// Adding and Removing are set while a reassignment (KIP-455) is in
	// progress: Replicas is then the target replicas followed by the ones
	// being removed; Adding are target replicas that were not replicas
	// before, Removing are replicas not in the target.
	Adding, Removing []int32
}

// Reassigning reports whether a reassignment is in progress.
func (p *Partition) Reassigning() bool { return len(p.Adding) > 0 || len(p.Removing) > 0 }

// Target is the replica set a reassignment moves to (Replicas when none is
// in progress).
func (p *Partition) Target() []int32 {
	var out []int32
	for _, r := range p.Replicas {
		if !contains(p.Removing, r) {
			out = append(out, r)
		}
	}
	return out
}

// Topic is a topic and its partitions.
type Topic struct {
	ID         UUID
	Name       string
	Configs    map[string]string // Kafka config names; only overrides
	Partitions []*Partition
}

// Config returns the topic's override for key.
func (t *Topic) Config(key string) (string, bool) {
	v, ok := t.Configs[key]
	return v, ok
}

// Lease is a time-limited claim on a background job (e.g. compaction of one
// partition's remote log).
type Lease struct {
	Kind      string
	Resource  string
	Holder    string
	Token     uint64 // fencing token: strictly grows across all leases
	ExpiresMs int64  // proposer clock, Unix ms
}

// ResourceType names what AlterConfigs changes; values are Kafka's.
type ResourceType int8

const (
	ResourceTopic  ResourceType = 2
	ResourceBroker ResourceType = 4  // Name "" means the cluster-wide default
	ResourceGroup  ResourceType = 32 // a consumer group's configs (Kafka 4.0, KIP-848)
	// ResourceUser is not Kafka's: a SASL user's SCRAM credentials, one
	// config per mechanism ("SCRAM-SHA-256" → "salt=…,stored_key=…,
	// server_key=…,iterations=…", the form ZooKeeper-era Kafka kept under
	// /config/users), changed by AlterUserScramCredentials.
	ResourceUser ResourceType = 65
	// ResourceClientQuota is internal (no Kafka config resource): the
	// client quotas of one entity (KIP-546), named by the broker's
	// canonical entity string, with the quota keys as config names.
	ResourceClientQuota ResourceType = 66
	// ResourceShareState is internal: the share-partition start offsets
	// (KIP-932) of one share group, named by the group id, one config per
	// partition, "<topic id hex>:<partition>" → "<offset>" (broker/share.go).
	ResourceShareState ResourceType = 68
	// ResourceDelegationToken is internal: one delegation token (KIP-48),
	// named by its token id, its fields as configs (owner, requester,
	// renewers, issue, expiry, max: broker/delegation_tokens.go). Its HMAC
	// is not stored: each broker derives it from the shared secret key.
	ResourceDelegationToken ResourceType = 69
)

// tokenConfigKeyPrefix marks a delegation token's entry in brokerConfigs.
const tokenConfigKeyPrefix = "token:"

// DelegationTokens returns every delegation token's fields, by token id
// (ResourceDelegationToken). The maps must not be modified.
func (s *State) DelegationTokens() map[string]map[string]string {
	out := map[string]map[string]string{}
	for k, m := range s.brokerConfigs {
		if id, ok := strings.CutPrefix(k, tokenConfigKeyPrefix); ok {
			out[id] = m
		}
	}
	return out
}

// DelegationToken returns one delegation token's fields.
func (s *State) DelegationToken(id string) (map[string]string, bool) {
	m, ok := s.brokerConfigs[tokenConfigKeyPrefix+id]
	return m, ok
}

// shareStateKey is where a share group's start offsets are kept in
// brokerConfigs.
func shareStateKey(group string) string { return "share:" + group }

// userConfigKey is where a user's credentials are kept in brokerConfigs, as
// groupConfigKey is for groups.
func userConfigKey(user string) string { return "user:" + user }

// groupConfigKey is where a group's configs are kept in the map of non-topic
// resources' configs (brokerConfigs), beside broker ids and "": no broker id
// has this form, and the snapshot format stays as it is.
func groupConfigKey(group string) string { return "group:" + group }

// quotaConfigKeyPrefix marks a client quota entity's entry in
// brokerConfigs (ResourceClientQuota), beside broker ids and groups.
const quotaConfigKeyPrefix = "quota:"

func quotaConfigKey(entity string) string { return quotaConfigKeyPrefix + entity }

// State is an immutable snapshot of the cluster metadata. Every committed
// command produces a new State sharing unchanged parts with the previous one,
// so holding one is cheap and reading it needs no lock.
type State struct {
	// Version is the Raft index of the last log entry applied.
	Version   uint64
	ClusterID string

	brokers        *immutable.SortedMap[int32, *Broker]
	topics         *immutable.SortedMap[string, *Topic] // key: string(topic ID)
	names          *immutable.SortedMap[string, UUID]
	leases         *immutable.SortedMap[string, *Lease] // key: kind \x00 resource
	brokerConfigs  map[string]map[string]string         // key: broker id, "" for cluster, groupConfigKey for a group
	acls           *ACLSet                              // parsed from brokerConfigs' "acl:" entries (acl.go)
	nextProducerID int64
	nextLeaseToken uint64
	partitions     int
}

func newState() *State {
	return &State{
		brokers:        immutable.NewSortedMap[int32, *Broker](nil),
		topics:         immutable.NewSortedMap[string, *Topic](nil),
		names:          immutable.NewSortedMap[string, UUID](nil),
		leases:         immutable.NewSortedMap[string, *Lease](nil),
		brokerConfigs:  map[string]map[string]string{},
		acls:           &ACLSet{},
		nextLeaseToken: 1,
	}
}

// Broker returns the broker with the given id.
func (s *State) Broker(id int32) (*Broker, bool) { return s.brokers.Get(id) }

// Brokers returns all registered brokers by id.
func (s *State) Brokers() []*Broker {
	out := make([]*Broker, 0, s.brokers.Len())
	for it := s.brokers.Iterator(); !it.Done(); {
		_, b, _ := it.Next()
		out = append(out, b)
	}
	return out
}

// Topic returns the topic with the given name.
func (s *State) Topic(name string) (*Topic, bool) {
	id, ok := s.names.Get(name)
	if !ok {
		return nil, false
	}
	return s.TopicByID(id)
}

// TopicByID returns the topic with the given id.
func (s *State) TopicByID(id UUID) (*Topic, bool) { return s.topics.Get(string(id[:])) }

// Topics returns all topics ordered by name.
func (s *State) Topics() []*Topic {
	out := make([]*Topic, 0, s.names.Len())
	for it := s.names.Iterator(); !it.Done(); {
		_, id, _ := it.Next()
		t, _ := s.TopicByID(id)
		out = append(out, t)
	}
	return out
}

// TopicCollision returns an existing topic whose name is name's but for
// '.' and '_' in the same places (Kafka refuses to create such a topic:
// metric names turn '.' into '_', so the two would share theirs), and
// whether there is one. A name without '.' or '_' collides with nothing.
func (s *State) TopicCollision(name string) (string, bool) {
	if !strings.ContainsAny(name, "._") {
		return "", false
	}
	norm := strings.ReplaceAll(name, ".", "_")
	for it := s.names.Iterator(); !it.Done(); {
		other, _, _ := it.Next()
		if other != name && len(other) == len(name) && strings.ReplaceAll(other, ".", "_") == norm {
			return other, true
		}
	}
	return "", false
}

// NumTopics and NumPartitions count the topics and partitions.
func (s *State) NumTopics() int     { return s.topics.Len() }
func (s *State) NumPartitions() int { return s.partitions }

// Partition returns one partition of a topic.
func (s *State) Partition(topic UUID, index int32) (*Partition, bool) {
	t, ok := s.TopicByID(topic)
	if !ok || index < 0 || int(index) >= len(t.Partitions) {
		return nil, false
	}
	return t.Partitions[index], true
}

// BrokerConfigs returns the dynamic configs of one broker ("" for the
// cluster-wide defaults). The map must not be modified.
func (s *State) BrokerConfigs(broker string) map[string]string { return s.brokerConfigs[broker] }

// GroupConfigs returns the configs set on a consumer group (AlterConfigs of
// a GROUP resource). The map must not be modified.
func (s *State) GroupConfigs(group string) map[string]string {
	return s.brokerConfigs[groupConfigKey(group)]
}

// ConfiguredGroups returns the groups that have configs set, sorted.
func (s *State) ConfiguredGroups() []string {
	var out []string
	for _, k := range sortedKeys(s.brokerConfigs) {
		if name, ok := strings.CutPrefix(k, groupConfigKey("")); ok && len(s.brokerConfigs[k]) > 0 {
			out = append(out, name)
		}
	}
	return out
}

// ShareState returns a share group's share-partition start offsets
// (ResourceShareState). The map must not be modified.
func (s *State) ShareState(group string) map[string]string {
	return s.brokerConfigs[shareStateKey(group)]
}

// ShareGroups returns the share groups that have start offsets, sorted.
func (s *State) ShareGroups() []string {
	var out []string
	for _, k := range sortedKeys(s.brokerConfigs) {
		if name, ok := strings.CutPrefix(k, "share:"); ok {
			out = append(out, name)
		}
	}
	return out
}

// ClientQuotas returns the client quotas by entity (the canonical entity
// strings the broker wrote, ResourceClientQuota), each entity's map from
// quota key to value. The maps must not be modified.
func (s *State) ClientQuotas() map[string]map[string]string {
	out := map[string]map[string]string{}
	for k, m := range s.brokerConfigs {
		if entity, ok := strings.CutPrefix(k, quotaConfigKeyPrefix); ok {
			out[entity] = m
		}
	}
	return out
}

// UserConfigs returns a SASL user's credentials by mechanism (ResourceUser).
// The map must not be modified.
func (s *State) UserConfigs(user string) map[string]string {
	return s.brokerConfigs[userConfigKey(user)]
}

// Users returns the names of the users that have credentials, sorted.
func (s *State) Users() []string {
	var out []string
	for _, k := range sortedKeys(s.brokerConfigs) {
		if name, ok := strings.CutPrefix(k, "user:"); ok {
			out = append(out, name)
		}
	}
	return out
}

// Lease returns the lease on (kind, resource), if any (possibly expired).
func (s *State) Lease(kind, resource string) (*Lease, bool) {
	return s.leases.Get(leaseKey(kind, resource))
}

// Leases returns all leases ordered by kind and resource.
func (s *State) Leases() []*Lease {
	out := make([]*Lease, 0, s.leases.Len())
	for it := s.leases.Iterator(); !it.Done(); {
		_, l, _ := it.Next()
		out = append(out, l)
	}
	return out
}

// NextProducerID is the first producer id not yet handed out.
func (s *State) NextProducerID() int64 { return s.nextProducerID }

func leaseKey(kind, resource string) string { return kind + "\x00" + resource }

// clone returns a shallow copy to be changed by one command.
func (s *State) clone() *State {
	c := *s
	return &c
}

func (s *State) putTopic(t *Topic) {
	s.topics = s.topics.Set(string(t.ID[:]), t)
	s.names = s.names.Set(t.Name, t.ID)
}

func (s *State) putBroker(b *Broker) { s.brokers = s.brokers.Set(b.ID, b) }

// withPartition returns a copy of t with partition p replaced.
func (t *Topic) withPartition(p *Partition) *Topic {
	c := *t
	c.Partitions = append([]*Partition(nil), t.Partitions...)
	c.Partitions[p.Index] = p
	return &c
}

func (p *Partition) clone() *Partition {
	c := *p
	c.Replicas = append([]int32(nil), p.Replicas...)
	c.ISR = append([]int32(nil), p.ISR...)
	c.Adding = append([]int32(nil), p.Adding...)
	c.Removing = append([]int32(nil), p.Removing...)
	return &c
}

// String is a compact, deterministic dump used by tests and the dump tool.
func (s *State) String() string {
	var out []byte
	out = fmt.Appendf(out, "version=%d cluster=%q next-producer-id=%d next-lease-token=%d\n", s.Version, s.ClusterID, s.nextProducerID, s.nextLeaseToken)
	for _, b := range s.Brokers() {
		out = fmt.Appendf(out, "broker %d epoch=%d rack=%q fenced=%t shutdown=%t hb=%d listeners=%v\n",
			b.ID, b.Epoch, b.Rack, b.Fenced, b.InControlledShutdown, b.LastHeartbeatMs, b.Listeners)
	}
	for _, t := range s.Topics() {
		out = fmt.Appendf(out, "topic %s id=%s configs=%s\n", t.Name, t.ID, fmtMap(t.Configs))
		for _, p := range t.Partitions {
			out = fmt.Appendf(out, "  p%d replicas=%v isr=%v leader=%d le=%d pe=%d", p.Index, p.Replicas, p.ISR, p.Leader, p.LeaderEpoch, p.PartitionEpoch)
			if p.Reassigning() {
				out = fmt.Appendf(out, " adding=%v removing=%v", p.Adding, p.Removing)
			}
			if p.Remote != (RemoteLog{}) {
				out = fmt.Appendf(out, " remote=%s@v%d[%d,%d) by-epoch=%d", p.Remote.ManifestKey, p.Remote.ManifestVersion, p.Remote.StartOffset, p.Remote.EndOffset, p.Remote.LeaderEpoch)
			}
			out = append(out, '\n')
		}
	}
	for _, k := range sortedKeys(s.brokerConfigs) {
		out = fmt.Appendf(out, "configs broker=%q %s\n", k, fmtMap(s.brokerConfigs[k]))
	}
	for _, l := range s.Leases() {
		out = fmt.Appendf(out, "lease %s/%s holder=%s token=%d expires=%d\n", l.Kind, l.Resource, l.Holder, l.Token, l.ExpiresMs)
	}
	return string(out)
}

func fmtMap(m map[string]string) string {
	var out []byte
	out = append(out, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			out = append(out, ' ')
		}
		out = fmt.Appendf(out, "%s=%s", k, m[k])
	}
	return string(append(out, '}'))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func without(s []int32, v int32) []int32 {
	out := make([]int32, 0, len(s))
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
