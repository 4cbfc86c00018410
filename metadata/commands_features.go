package metadata

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Feature levels (KIP-584, KIP-1022): cluster-wide levels of named
// features that clients read from ApiVersions (transaction.version tells
// franz-go whether to use KIP-890's transaction flow, group.version whether
// KIP-848 consumer groups are served). The levels in force are those the
// cluster recorded with UpdateFeatures, and for a feature never recorded the
// default the broker gives (FeatureRange.Default). They are kept in the map
// of non-topic configs (brokerConfigs) under featuresKey, level by name, with
// the Raft index of the last change under the empty name, so the snapshot
// format stays as it is.

const featuresKey = "features"

// FeatureUpgradeType is how an update may move a level (Kafka's
// FeatureUpdate.UpgradeType codes).
type FeatureUpgradeType int8

const (
	FeatureUpgrade         FeatureUpgradeType = 1 // only up (or unchanged)
	FeatureSafeDowngrade   FeatureUpgradeType = 2 // down without losing metadata
	FeatureUnsafeDowngrade FeatureUpgradeType = 3 // down, possibly losing metadata
)

// FeatureUpdate sets one feature's level.
type FeatureUpdate struct {
	Name    string
	Level   int16 // 0 takes the feature out of use
	Upgrade FeatureUpgradeType
}

// FeatureRange is a feature the proposing broker serves: the levels it
// supports and the level in force while none is recorded.
type FeatureRange struct {
	Name         string
	Min, Max     int16
	DefaultLevel int16
}

func init() {
	register(TypeBrokerFeatures, commandInfo{name: "BrokerFeatures", version: 1, ignorable: true, decode: func(_ uint8, d *decoder) Command {
		c := &BrokerFeatures{BrokerID: d.int32(), IncarnationID: d.uuid()}
		n := d.count(3) // a name's length and two varints: 3 bytes at the least
		for i := 0; i < n && d.err == nil; i++ {
			c.Supported = append(c.Supported, FeatureRange{Name: d.str(), Min: d.int16(), Max: d.int16()})
		}
		return c
	}})
	register(TypeUpdateFeatures, commandInfo{name: "UpdateFeatures", version: 1, ignorable: true, decode: func(_ uint8, d *decoder) Command {
		c := &UpdateFeatures{}
		n := d.count(3)
		for i := 0; i < n && d.err == nil; i++ {
			u := FeatureUpdate{Name: d.str(), Level: d.int16()}
			if t := d.int16(); t < math.MinInt8 || t > math.MaxInt8 {
				d.fail(fmt.Errorf("upgrade type %d out of range", t))
			} else {
				u.Upgrade = FeatureUpgradeType(t)
			}
			c.Updates = append(c.Updates, u)
		}
		n = d.count(4)
		for i := 0; i < n && d.err == nil; i++ {
			c.Supported = append(c.Supported, FeatureRange{Name: d.str(), Min: d.int16(), Max: d.int16(), DefaultLevel: d.int16()})
		}
		return c
	}})
}

// UpdateFeatures changes finalized feature levels, all or none (Kafka's
// controller applies an UpdateFeatures request atomically). Supported is the
// proposing broker's view of what can be finalized; an update of a feature
// outside it, to a level outside its range, moving down without a downgrade
// type or up with one, is refused with ErrInvalidUpdateVersion. The command
// is ignorable: a binary that predates it keeps its default levels.
type UpdateFeatures struct {
	Updates   []FeatureUpdate
	Supported []FeatureRange
}

func (*UpdateFeatures) Type() CommandType { return TypeUpdateFeatures }
func (c *UpdateFeatures) encode(e *encoder) {
	e.uvarint(uint64(len(c.Updates)))
	for _, u := range c.Updates {
		e.str(u.Name)
		e.varint(int64(u.Level))
		e.varint(int64(u.Upgrade))
	}
	e.uvarint(uint64(len(c.Supported)))
	for _, r := range c.Supported {
		e.str(r.Name)
		e.varint(int64(r.Min))
		e.varint(int64(r.Max))
		e.varint(int64(r.DefaultLevel))
	}
}

func (c *UpdateFeatures) apply(s *State, index uint64) (Result, error) {
	if err := CheckFeatureUpdates(s, c.Updates, c.Supported); err != nil {
		return Result{}, err
	}
	m := map[string]string{}
	for k, v := range s.brokerConfigs[featuresKey] {
		m[k] = v
	}
	for _, u := range c.Updates {
		m[u.Name] = strconv.Itoa(int(u.Level))
	}
	m[""] = strconv.FormatUint(index, 10)
	bc := make(map[string]map[string]string, len(s.brokerConfigs)+1)
	for k, v := range s.brokerConfigs {
		bc[k] = v
	}
	bc[featuresKey] = m
	s.brokerConfigs = bc
	return Result{}, nil
}

// BaselineFeatures are the ranges of a broker that recorded none for its
// registration (a binary that predates BrokerFeatures): what every Sediment
// binary has served.
var BaselineFeatures = []FeatureRange{
	{Name: "group.version", Min: 0, Max: 1},
	{Name: "transaction.version", Min: 0, Max: 2},
}

// BrokerFeatures records the feature ranges a broker's registration
// (IncarnationID) supports, as Kafka's BrokerRegistration carries them:
// UpdateFeatures refuses a level some registered broker does not support.
// Ranges recorded for an older incarnation do not count (the broker
// restarted, perhaps as another binary). Ignorable.
type BrokerFeatures struct {
	BrokerID      int32
	IncarnationID UUID
	Supported     []FeatureRange // DefaultLevel is not recorded
}

func (*BrokerFeatures) Type() CommandType { return TypeBrokerFeatures }
func (c *BrokerFeatures) encode(e *encoder) {
	e.varint(int64(c.BrokerID))
	e.uuid(c.IncarnationID)
	e.uvarint(uint64(len(c.Supported)))
	for _, r := range c.Supported {
		e.str(r.Name)
		e.varint(int64(r.Min))
		e.varint(int64(r.Max))
	}
}

func (c *BrokerFeatures) apply(s *State, _ uint64) (Result, error) {
	b, ok := s.Broker(c.BrokerID)
	if !ok {
		return Result{}, reject(ErrUnknownBroker, "broker %d", c.BrokerID)
	}
	if b.IncarnationID != c.IncarnationID {
		return Result{}, reject(ErrStaleBrokerEpoch, "broker %d: incarnation %s is not the registered %s", c.BrokerID, c.IncarnationID, b.IncarnationID)
	}
	m := map[string]string{"": c.IncarnationID.String()}
	for _, r := range c.Supported {
		if r.Name == "" || r.Min < 0 || r.Max < r.Min {
			return Result{}, reject(ErrInvalidRequest, "feature range %q %d-%d", r.Name, r.Min, r.Max)
		}
		m[r.Name] = strconv.Itoa(int(r.Min)) + "-" + strconv.Itoa(int(r.Max))
	}
	bc := make(map[string]map[string]string, len(s.brokerConfigs)+1)
	for k, v := range s.brokerConfigs {
		bc[k] = v
	}
	bc[brokerFeaturesKey(c.BrokerID)] = m
	s.brokerConfigs = bc
	return Result{}, nil
}

func brokerFeaturesKey(id int32) string { return "features:broker:" + strconv.Itoa(int(id)) }

// FeatureRangesRecorded reports whether broker id recorded ranges for its
// current registration.
func (s *State) FeatureRangesRecorded(id int32) bool {
	b, ok := s.Broker(id)
	m := s.brokerConfigs[brokerFeaturesKey(id)]
	return ok && m != nil && m[""] == b.IncarnationID.String()
}

// BrokerFeatureRanges returns the ranges broker id recorded for its current
// registration, or BaselineFeatures if it recorded none.
func (s *State) BrokerFeatureRanges(id int32) []FeatureRange {
	if !s.FeatureRangesRecorded(id) {
		return BaselineFeatures
	}
	m := s.brokerConfigs[brokerFeaturesKey(id)]
	var out []FeatureRange
	for _, name := range sortedKeys(m) {
		if name == "" {
			continue
		}
		lo, hi, _ := strings.Cut(m[name], "-")
		mn, err1 := strconv.ParseInt(lo, 10, 16)
		mx, err2 := strconv.ParseInt(hi, 10, 16)
		if err1 == nil && err2 == nil {
			out = append(out, FeatureRange{Name: name, Min: int16(mn), Max: int16(mx)})
		}
	}
	return out
}

// CheckFeatureUpdates returns the error UpdateFeatures would be refused
// with on s, or nil (a validate-only request stops here). The rules are
// Kafka's FeatureControlManager's.
func CheckFeatureUpdates(s *State, updates []FeatureUpdate, supported []FeatureRange) error {
	if len(updates) == 0 {
		return reject(ErrInvalidRequest, "no feature updates")
	}
	seen := map[string]bool{}
	for _, u := range updates {
		if u.Name == "" {
			return reject(ErrInvalidUpdateVersion, "a feature's name cannot be empty")
		}
		if seen[u.Name] {
			return reject(ErrInvalidRequest, "feature %s updated twice in one request", u.Name)
		}
		seen[u.Name] = true
		var r *FeatureRange
		for i := range supported {
			if supported[i].Name == u.Name {
				r = &supported[i]
			}
		}
		switch {
		case u.Upgrade < FeatureUpgrade || u.Upgrade > FeatureUnsafeDowngrade:
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: the controller does not support the given upgrade type", u.Level, u.Name)
		case u.Level < 0:
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: a feature version cannot be less than 0", u.Level, u.Name)
		case r == nil:
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: the controller does not support the given feature", u.Level, u.Name)
		case u.Level != 0 && (u.Level < r.Min || u.Level > r.Max):
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: the controller only supports versions %d-%d", u.Level, u.Name, r.Min, r.Max)
		}
		cur := s.FeatureLevel(u.Name, r.DefaultLevel)
		if u.Level < cur && u.Upgrade == FeatureUpgrade {
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade", u.Level, u.Name)
		}
		if u.Level > cur && u.Upgrade != FeatureUpgrade {
			return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: can't downgrade to a newer version", u.Level, u.Name)
		}
		// Every registered broker must serve the level (a feature it
		// does not know: level 0 only), as Kafka's controller checks.
		for _, b := range s.Brokers() {
			ok := u.Level == 0
			for _, br := range s.BrokerFeatureRanges(b.ID) {
				if br.Name == u.Name {
					ok = u.Level >= br.Min && u.Level <= br.Max
				}
			}
			if !ok {
				return reject(ErrInvalidUpdateVersion, "invalid update version %d for feature %s: broker %d does not support the given version", u.Level, u.Name, b.ID)
			}
		}
	}
	return nil
}

// FeatureLevel returns the feature's finalized level: the one recorded, or
// def if none was.
func (s *State) FeatureLevel(name string, def int16) int16 {
	if name == "" {
		return def
	}
	if v, ok := s.brokerConfigs[featuresKey][name]; ok {
		if n, err := strconv.ParseInt(v, 10, 16); err == nil {
			return int16(n)
		}
	}
	return def
}

// FeaturesEpoch is the Raft index of the last feature change, 0 if none.
func (s *State) FeaturesEpoch() int64 {
	n, _ := strconv.ParseInt(s.brokerConfigs[featuresKey][""], 10, 64)
	return n
}
