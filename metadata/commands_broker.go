package metadata

import (
	"strconv"
	"time"
)

// Cluster and broker config names the state machine itself reads.
const (
	ConfigSessionTimeoutMs      = "broker.session.timeout.ms"
	ConfigUncleanLeaderElection = "unclean.leader.election.enable"
	ConfigDefaultReplication    = "default.replication.factor"
	ConfigNumPartitions         = "num.partitions"
	defaultSessionTimeoutMs     = 9000
)

func init() {
	register(TypeSetClusterID, commandInfo{name: "SetClusterID", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &SetClusterID{ClusterID: d.str()}
	}})
	register(TypeRegisterBroker, commandInfo{name: "RegisterBroker", version: 1, decode: decodeRegisterBroker})
	register(TypeBrokerHeartbeat, commandInfo{name: "BrokerHeartbeat", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &BrokerHeartbeat{BrokerID: d.int32(), BrokerEpoch: d.varint(), NowMs: d.varint(), WantFenced: d.bool()}
	}})
	register(TypeFenceBroker, commandInfo{name: "FenceBroker", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &FenceBroker{BrokerID: d.int32(), BrokerEpoch: d.varint()}
	}})
	register(TypeUnfenceBroker, commandInfo{name: "UnfenceBroker", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &UnfenceBroker{BrokerID: d.int32(), BrokerEpoch: d.varint()}
	}})
	register(TypeControlledShutdown, commandInfo{name: "ControlledShutdown", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &ControlledShutdown{BrokerID: d.int32(), BrokerEpoch: d.varint()}
	}})
	register(TypeUnregisterBroker, commandInfo{name: "UnregisterBroker", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &UnregisterBroker{BrokerID: d.int32()}
	}})
	register(TypeAllocateProducerIDs, commandInfo{name: "AllocateProducerIDs", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &AllocateProducerIDs{BrokerID: d.int32(), BrokerEpoch: d.varint(), Count: d.int32()}
	}})
}

// SetClusterID records the cluster id once; the first leader proposes it.
type SetClusterID struct{ ClusterID string }

func (*SetClusterID) Type() CommandType   { return TypeSetClusterID }
func (c *SetClusterID) encode(e *encoder) { e.str(c.ClusterID) }
func (c *SetClusterID) apply(s *State, _ uint64) (Result, error) {
	if c.ClusterID == "" {
		return Result{}, reject(ErrInvalidRequest, "empty cluster id")
	}
	if s.ClusterID != "" && s.ClusterID != c.ClusterID {
		return Result{}, reject(ErrInvalidRequest, "cluster id already %q", s.ClusterID)
	}
	s.ClusterID = c.ClusterID
	return Result{}, nil
}

// RegisterBroker registers a broker process (a new incarnation). The new
// registration starts fenced; its first heartbeat unfences it. It is refused
// with ErrDuplicateBroker while another incarnation of the same id holds a live
// session, unless PreviousBrokerEpoch names that registration (a clean restart
// of the same broker).
type RegisterBroker struct {
	BrokerID            int32
	IncarnationID       UUID
	Listeners           []Listener
	Rack                string
	PreviousBrokerEpoch int64 // -1 when unknown
	NowMs               int64 // set by the proposer when zero
}

func (*RegisterBroker) Type() CommandType { return TypeRegisterBroker }
func (c *RegisterBroker) encode(e *encoder) {
	e.varint(int64(c.BrokerID))
	e.uuid(c.IncarnationID)
	e.uvarint(uint64(len(c.Listeners)))
	for _, l := range c.Listeners {
		e.str(l.Name)
		e.str(l.Host)
		e.varint(int64(l.Port))
		e.varint(int64(l.SecurityProtocol))
	}
	e.str(c.Rack)
	e.varint(c.PreviousBrokerEpoch)
	e.varint(c.NowMs)
}

func decodeRegisterBroker(_ uint8, d *decoder) Command {
	c := &RegisterBroker{BrokerID: d.int32(), IncarnationID: d.uuid()}
	n := d.count(4)
	for range n {
		l := Listener{Name: d.str(), Host: d.str(), Port: d.int32()}
		l.SecurityProtocol = int16(d.int32())
		c.Listeners = append(c.Listeners, l)
	}
	c.Rack = d.str()
	c.PreviousBrokerEpoch = d.varint()
	c.NowMs = d.varint()
	return c
}

func (c *RegisterBroker) prepare(p *prepareContext) error {
	if c.NowMs == 0 {
		c.NowMs = p.nowMs
	}
	// The live-session check of apply compares wall clocks (the only
	// time a command carries); the leader first checks it on its
	// monotonic clock, as Kafka's controller does with its in-memory
	// sessions: with the leader's wall clock stepped forward past the
	// session timeout, apply would take the old session for expired and
	// let a second broker register under a live one's id.
	if old, ok := p.st.Broker(c.BrokerID); ok && p.renewedWithin != nil && !old.Fenced && !old.InControlledShutdown &&
		old.IncarnationID != c.IncarnationID && c.PreviousBrokerEpoch != old.Epoch && p.renewedWithin(c.BrokerID, sessionTimeoutMs(p.st)) {
		return reject(ErrDuplicateBroker, "broker %d has a live session (incarnation %s, epoch %d)", c.BrokerID, old.IncarnationID, old.Epoch)
	}
	return nil
}

func (c *RegisterBroker) apply(s *State, index uint64) (Result, error) {
	if c.BrokerID < 0 {
		return Result{}, reject(ErrInvalidRequest, "broker id %d", c.BrokerID)
	}
	if c.IncarnationID.IsZero() {
		return Result{}, reject(ErrInvalidRequest, "zero incarnation id")
	}
	if old, ok := s.Broker(c.BrokerID); ok {
		live := !old.Fenced && !old.InControlledShutdown &&
			c.NowMs-old.LastHeartbeatMs < sessionTimeoutMs(s)
		if old.IncarnationID != c.IncarnationID && live && c.PreviousBrokerEpoch != old.Epoch {
			return Result{}, reject(ErrDuplicateBroker, "broker %d has a live session (incarnation %s, epoch %d)", c.BrokerID, old.IncarnationID, old.Epoch)
		}
		if !old.Fenced {
			fence(s, c.BrokerID)
		}
	}
	s.putBroker(&Broker{
		ID: c.BrokerID, IncarnationID: c.IncarnationID, Epoch: int64(index),
		Listeners: append([]Listener(nil), c.Listeners...), Rack: c.Rack,
		Fenced: true, LastHeartbeatMs: c.NowMs,
	})
	return Result{BrokerEpoch: int64(index)}, nil
}

// BrokerHeartbeat renews a broker's session. A fenced broker that is not
// shutting down is unfenced unless WantFenced (it is still catching up).
type BrokerHeartbeat struct {
	BrokerID    int32
	BrokerEpoch int64
	NowMs       int64 // set by the proposer when zero
	WantFenced  bool
}

func (*BrokerHeartbeat) Type() CommandType { return TypeBrokerHeartbeat }
func (c *BrokerHeartbeat) encode(e *encoder) {
	e.varint(int64(c.BrokerID))
	e.varint(c.BrokerEpoch)
	e.varint(c.NowMs)
	e.bool(c.WantFenced)
}

func (c *BrokerHeartbeat) prepare(p *prepareContext) error {
	if c.NowMs == 0 {
		c.NowMs = p.nowMs
	}
	return nil
}

func (c *BrokerHeartbeat) apply(s *State, _ uint64) (Result, error) {
	b, err := brokerWithEpoch(s, c.BrokerID, c.BrokerEpoch)
	if err != nil {
		return Result{}, err
	}
	nb := *b
	if c.NowMs > nb.LastHeartbeatMs {
		nb.LastHeartbeatMs = c.NowMs
	}
	s.putBroker(&nb)
	if nb.Fenced && !nb.InControlledShutdown && !c.WantFenced {
		unfence(s, c.BrokerID)
	}
	b, _ = s.Broker(c.BrokerID)
	return Result{Fenced: b.Fenced}, nil
}

// FenceBroker fences a broker (the controller does this when its session
// expires): it leaves every ISR it is in (except as the last member) and every
// partition it led gets a new leader from the ISR. BrokerEpoch -1 matches any.
type FenceBroker struct {
	BrokerID    int32
	BrokerEpoch int64
}

func (*FenceBroker) Type() CommandType   { return TypeFenceBroker }
func (c *FenceBroker) encode(e *encoder) { e.varint(int64(c.BrokerID)); e.varint(c.BrokerEpoch) }
func (c *FenceBroker) apply(s *State, _ uint64) (Result, error) {
	b, err := brokerWithEpoch(s, c.BrokerID, c.BrokerEpoch)
	if err != nil {
		return Result{}, err
	}
	if !b.Fenced {
		fence(s, c.BrokerID)
	}
	return Result{Fenced: true}, nil
}

// UnfenceBroker unfences a broker (as its heartbeat would), making it eligible
// to lead partitions that have no leader and list it in their ISR.
type UnfenceBroker struct {
	BrokerID    int32
	BrokerEpoch int64
}

func (*UnfenceBroker) Type() CommandType   { return TypeUnfenceBroker }
func (c *UnfenceBroker) encode(e *encoder) { e.varint(int64(c.BrokerID)); e.varint(c.BrokerEpoch) }
func (c *UnfenceBroker) apply(s *State, _ uint64) (Result, error) {
	b, err := brokerWithEpoch(s, c.BrokerID, c.BrokerEpoch)
	if err != nil {
		return Result{}, err
	}
	if b.Fenced {
		unfence(s, c.BrokerID)
	}
	return Result{}, nil
}

// ControlledShutdown marks a broker as shutting down: leadership of its
// partitions moves to another ISR member (or to no leader when there is none)
// and it leaves the ISRs (except as the last member). It stays so until it
// registers again.
type ControlledShutdown struct {
	BrokerID    int32
	BrokerEpoch int64
}

func (*ControlledShutdown) Type() CommandType { return TypeControlledShutdown }
func (c *ControlledShutdown) encode(e *encoder) {
	e.varint(int64(c.BrokerID))
	e.varint(c.BrokerEpoch)
}
func (c *ControlledShutdown) apply(s *State, _ uint64) (Result, error) {
	b, err := brokerWithEpoch(s, c.BrokerID, c.BrokerEpoch)
	if err != nil {
		return Result{}, err
	}
	nb := *b
	nb.InControlledShutdown = true
	s.putBroker(&nb)
	removeFromPartitions(s, c.BrokerID)
	return Result{}, nil
}

// UnregisterBroker removes a broker's registration (Kafka's UnregisterBroker,
// KIP-631: for a broker that was shut down for good): it is fenced first if
// it is not (it leaves the ISRs except as the last member, its leaderships
// move), then it and its recorded feature ranges are forgotten, so it no
// longer counts as registered (UpdateFeatures, DescribeCluster). Its
// replica assignments and broker configs stay. A live broker that is
// unregistered finds its heartbeats refused (ErrUnknownBroker) until it
// registers again, at its next start.
type UnregisterBroker struct {
	BrokerID int32
}

func (*UnregisterBroker) Type() CommandType   { return TypeUnregisterBroker }
func (c *UnregisterBroker) encode(e *encoder) { e.varint(int64(c.BrokerID)) }
func (c *UnregisterBroker) apply(s *State, _ uint64) (Result, error) {
	b, ok := s.Broker(c.BrokerID)
	if !ok {
		return Result{}, reject(ErrUnknownBroker, "broker %d is not registered", c.BrokerID)
	}
	if !b.Fenced {
		fence(s, c.BrokerID)
	}
	s.brokers = s.brokers.Delete(c.BrokerID)
	if key := brokerFeaturesKey(c.BrokerID); s.brokerConfigs[key] != nil {
		bc := make(map[string]map[string]string, len(s.brokerConfigs))
		for k, v := range s.brokerConfigs {
			if k != key {
				bc[k] = v
			}
		}
		s.brokerConfigs = bc
	}
	return Result{}, nil
}

// AllocateProducerIDs hands a broker a block of Count producer ids.
type AllocateProducerIDs struct {
	BrokerID    int32
	BrokerEpoch int64
	Count       int32 // 1..1,000,000
}

const maxProducerIDBlock = 1_000_000

func (*AllocateProducerIDs) Type() CommandType { return TypeAllocateProducerIDs }
func (c *AllocateProducerIDs) encode(e *encoder) {
	e.varint(int64(c.BrokerID))
	e.varint(c.BrokerEpoch)
	e.varint(int64(c.Count))
}
func (c *AllocateProducerIDs) apply(s *State, _ uint64) (Result, error) {
	if _, err := brokerWithEpoch(s, c.BrokerID, c.BrokerEpoch); err != nil {
		return Result{}, err
	}
	if c.Count <= 0 || c.Count > maxProducerIDBlock {
		return Result{}, reject(ErrInvalidRequest, "producer id block of %d", c.Count)
	}
	start := s.nextProducerID
	if start > (1<<63-1)-int64(c.Count) {
		return Result{}, reject(ErrInvalidRequest, "producer ids exhausted")
	}
	s.nextProducerID = start + int64(c.Count)
	return Result{ProducerIDStart: start, ProducerIDCount: c.Count}, nil
}

// brokerWithEpoch finds a broker and checks its epoch (-1 matches any).
func brokerWithEpoch(s *State, id int32, epoch int64) (*Broker, error) {
	b, ok := s.Broker(id)
	if !ok {
		return nil, reject(ErrUnknownBroker, "broker %d", id)
	}
	if epoch != -1 && epoch != b.Epoch {
		return nil, reject(ErrStaleBrokerEpoch, "broker %d epoch %d, current %d", id, epoch, b.Epoch)
	}
	return b, nil
}

// SessionTimeout is broker.session.timeout.ms (default 9 s): a broker's
// session lasts that long after its last registration or heartbeat, and a
// new registration of its id is refused (ErrDuplicateBroker) while it does.
func (s *State) SessionTimeout() time.Duration {
	return time.Duration(sessionTimeoutMs(s)) * time.Millisecond
}

func sessionTimeoutMs(s *State) int64 {
	if v, ok := s.brokerConfigs[""][ConfigSessionTimeoutMs]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return defaultSessionTimeoutMs
}

// eligible reports whether a broker may lead or join an ISR.
func eligible(s *State, id int32) bool {
	b, ok := s.Broker(id)
	return ok && !b.Fenced && !b.InControlledShutdown
}

// ISREligible reports whether broker id, its fetches carrying broker epoch
// brokerEpoch (-1 unknown), may join an ISR: it is registered, neither fenced
// nor shutting down, and (when the epoch is known) the registered
// incarnation. ChangeLeaderAndISR refuses to add any other broker (with its
// BrokerEpochs, KIP-841); a leader asks this before planning an expansion,
// so that a refused addition does not hold back a shrink planned with it.
func (s *State) ISREligible(id int32, brokerEpoch int64) bool {
	b, ok := s.Broker(id)
	return ok && !b.Fenced && !b.InControlledShutdown && (brokerEpoch < 0 || brokerEpoch == b.Epoch)
}

func uncleanAllowed(s *State, t *Topic) bool {
	v, ok := t.Configs[ConfigUncleanLeaderElection]
	if !ok {
		v = s.brokerConfigs[""][ConfigUncleanLeaderElection]
	}
	return v == "true"
}

// fence marks a broker fenced and removes it from leadership and ISRs.
func fence(s *State, id int32) {
	b, _ := s.Broker(id)
	nb := *b
	nb.Fenced = true
	s.putBroker(&nb)
	removeFromPartitions(s, id)
}

// removeFromPartitions takes broker id out of every ISR (keeping it as the
// last member, so that the knowledge of who has the data is not lost) and
// elects a new leader from the ISR where it led. Where it was the last ISR
// member and unclean election is allowed, the leader elected outside the ISR
// becomes the ISR.
func removeFromPartitions(s *State, id int32) {
	forEachTopic(s, func(t *Topic) *Topic {
		var nt *Topic
		for _, p := range t.Partitions {
			if !contains(p.ISR, id) && p.Leader != id {
				continue
			}
			np := p.clone()
			if len(np.ISR) > 1 {
				np.ISR = without(np.ISR, id)
			}
			if np.Leader == id {
				np.Leader = electLeader(s, t, np)
				np.LeaderEpoch++
				if np.Leader != NoLeader && !contains(np.ISR, np.Leader) {
					// Unclean: the new leader's log is the only one known
					// to be whole from now on (Kafka's
					// PartitionChangeBuilder does the same).
					np.ISR = []int32{np.Leader}
				}
			}
			np.PartitionEpoch++
			if nt == nil {
				nt = copyTopic(t)
			}
			nt.Partitions[np.Index] = np
		}
		return nt
	})
}

// unfence marks a broker unfenced and makes it leader of leaderless
// partitions whose ISR lists it (or, with unclean election allowed, that it
// replicates).
func unfence(s *State, id int32) {
	b, _ := s.Broker(id)
	nb := *b
	nb.Fenced = false
	s.putBroker(&nb)
	forEachTopic(s, func(t *Topic) *Topic {
		var nt *Topic
		for _, p := range t.Partitions {
			if p.Leader != NoLeader || !contains(p.Replicas, id) {
				continue
			}
			leader := electLeader(s, t, p)
			if leader == NoLeader {
				continue
			}
			np := p.clone()
			if !contains(np.ISR, leader) { // unclean
				np.ISR = []int32{leader}
			}
			np.Leader = leader
			np.LeaderEpoch++
			np.PartitionEpoch++
			if nt == nil {
				nt = copyTopic(t)
			}
			nt.Partitions[np.Index] = np
		}
		return nt
	})
}

// electLeader picks the first eligible ISR member in replica order; failing
// that, with unclean election allowed, the first eligible replica.
func electLeader(s *State, t *Topic, p *Partition) int32 {
	for _, r := range p.Replicas {
		if contains(p.ISR, r) && eligible(s, r) {
			return r
		}
	}
	if uncleanAllowed(s, t) {
		for _, r := range p.Replicas {
			if eligible(s, r) {
				return r
			}
		}
	}
	return NoLeader
}

// forEachTopic calls f for every topic in id order; a non-nil result replaces
// the topic.
func forEachTopic(s *State, f func(t *Topic) *Topic) {
	topics := s.topics
	for it := s.topics.Iterator(); !it.Done(); {
		k, t, _ := it.Next()
		if nt := f(t); nt != nil {
			topics = topics.Set(k, nt)
		}
	}
	s.topics = topics
}

func copyTopic(t *Topic) *Topic {
	c := *t
	c.Partitions = append([]*Partition(nil), t.Partitions...)
	return &c
}
