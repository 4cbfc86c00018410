package metadata

import (
	"fmt"
)

// CommandType is the first byte of every encoded command.
type CommandType uint8

// Command types. Never renumber; retire a number by leaving it unused.
const (
	TypeSetClusterID        CommandType = 1
	TypeRegisterBroker      CommandType = 2
	TypeBrokerHeartbeat     CommandType = 3
	TypeFenceBroker         CommandType = 4
	TypeUnfenceBroker       CommandType = 5
	TypeControlledShutdown  CommandType = 6
	TypeCreateTopic         CommandType = 7
	TypeDeleteTopic         CommandType = 8
	TypeCreatePartitions    CommandType = 9
	TypeAlterConfigs        CommandType = 10
	TypeChangeLeaderAndISR  CommandType = 11
	TypeCommitRemoteLog     CommandType = 12
	TypeAllocateProducerIDs CommandType = 13
	TypeAcquireLease        CommandType = 14
	TypeRenewLease          CommandType = 15
	TypeReleaseLease        CommandType = 16
	TypeAlterReassignment   CommandType = 17
	TypeUpdateFeatures      CommandType = 18
	TypeBrokerFeatures      CommandType = 19
	TypeUnregisterBroker    CommandType = 20
	TypeRemoteTopicDeleted  CommandType = 21
)

// Command is one change to the metadata state. The set of commands is closed:
// every implementation lives in this package and is listed in the registry.
type Command interface {
	// Type identifies the command in the log.
	Type() CommandType
	// encode appends the body (after the two header bytes) at the current
	// version of the command.
	encode(e *encoder)
	// apply checks the command against s (a private copy) and changes it, or
	// returns a rejection (an error wrapping one of the Err* sentinels), in
	// which case s is discarded. apply must be deterministic: no clock, no
	// randomness, no map iteration order.
	apply(s *State, index uint64) (Result, error)
}

// preparer is implemented by commands the leader completes before proposing
// (timestamps, topic ids, replica assignments). It runs on the leader only and
// may be non-deterministic; the FSM sees the completed command.
type preparer interface {
	prepare(p *prepareContext) error
}

// Result is what a committed command returns. Only the fields of the command
// that produced it are set.
type Result struct {
	Version         uint64 // Raft index at which the command committed
	TopicID         UUID   // CreateTopic
	BrokerEpoch     int64  // RegisterBroker
	Fenced          bool   // BrokerHeartbeat: the broker is (still) fenced
	ProducerIDStart int64  // AllocateProducerIDs
	ProducerIDCount int32  // AllocateProducerIDs
	LeaseToken      uint64 // AcquireLease, RenewLease
	LeaseExpiresMs  int64  // AcquireLease, RenewLease
	ManifestVersion int64  // CommitRemoteLog
	LeaderEpoch     int32  // ChangeLeaderAndISR
	PartitionEpoch  int32  // ChangeLeaderAndISR
}

func (r *Result) encode(e *encoder) {
	e.uvarint(r.Version)
	e.uuid(r.TopicID)
	e.varint(r.BrokerEpoch)
	e.bool(r.Fenced)
	e.varint(r.ProducerIDStart)
	e.varint(int64(r.ProducerIDCount))
	e.uvarint(r.LeaseToken)
	e.varint(r.LeaseExpiresMs)
	e.varint(r.ManifestVersion)
	e.varint(int64(r.LeaderEpoch))
	e.varint(int64(r.PartitionEpoch))
}

func (r *Result) decode(d *decoder) {
	r.Version = d.uvarint()
	r.TopicID = d.uuid()
	r.BrokerEpoch = d.varint()
	r.Fenced = d.bool()
	r.ProducerIDStart = d.varint()
	r.ProducerIDCount = d.int32()
	r.LeaseToken = d.uvarint()
	r.LeaseExpiresMs = d.varint()
	r.ManifestVersion = d.varint()
	r.LeaderEpoch = d.int32()
	r.PartitionEpoch = d.int32()
}

// Header flags, in the second byte alongside the version (bits 0-6).
const (
	flagIgnorable   = 0x80 // an FSM that does not know this type or version skips it
	versionMask     = 0x7f
	commandHeaderSz = 2
)

type commandInfo struct {
	name string
	// version is the version this binary writes; decode accepts 1..version.
	version uint8
	// ignorable commands may be skipped by an older binary that cannot decode
	// them (the flag is written into each entry, so the old binary knows).
	ignorable bool
	decode    func(version uint8, d *decoder) Command
}

var registry [256]*commandInfo

func register(t CommandType, info commandInfo) {
	if registry[t] != nil {
		panic(fmt.Sprintf("metadata: command type %d registered twice", t))
	}
	if info.version == 0 || info.version > versionMask {
		panic(fmt.Sprintf("metadata: command %s has bad version %d", info.name, info.version))
	}
	registry[t] = &info
}

// String returns the command's name.
func (t CommandType) String() string {
	if info := registry[t]; info != nil {
		return info.name
	}
	return fmt.Sprintf("CommandType(%d)", uint8(t))
}

// EncodeCommand returns the log encoding of cmd:
//
//	+------+-------------------+-------------...
//	| type | ignorable|version | body (per command, see doc.go)
//	+------+-------------------+-------------...
func EncodeCommand(cmd Command) []byte {
	info := registry[cmd.Type()]
	if info == nil {
		panic(fmt.Sprintf("metadata: command type %d not registered", cmd.Type()))
	}
	flags := info.version
	if v, ok := cmd.(versionedCommand); ok {
		flags = v.encodeVersion()
	}
	if info.ignorable {
		flags |= flagIgnorable
	}
	e := encoder{buf: make([]byte, 0, 64)}
	e.u8(uint8(cmd.Type()))
	e.u8(flags)
	cmd.encode(&e)
	return e.buf
}

// versionedCommand is a command that writes an older version when it uses
// none of the newer fields, so that a binary that knows only that version
// still applies it (a rolling upgrade).
type versionedCommand interface {
	encodeVersion() uint8
}

// errIgnored is returned by DecodeCommand for an unknown entry flagged
// ignorable; the FSM skips it.
type errIgnored struct{ typ, version uint8 }

func (e errIgnored) Error() string {
	return fmt.Sprintf("metadata: ignorable command type %d version %d skipped", e.typ, e.version)
}
func (e errIgnored) Unwrap() error { return ErrUnknownCommand }

// DecodeCommand parses one encoded command. It returns an error wrapping
// ErrUnknownCommand for a type or version this binary does not know, and
// ErrCorruptCommand for a malformed body (including trailing bytes).
func DecodeCommand(b []byte) (Command, error) {
	if len(b) < commandHeaderSz {
		return nil, fmt.Errorf("%w: %d bytes, short header", ErrCorruptCommand, len(b))
	}
	typ, flags := b[0], b[1]
	version := flags & versionMask
	info := registry[typ]
	if info == nil || version == 0 || version > info.version {
		if flags&flagIgnorable != 0 {
			return nil, errIgnored{typ, version}
		}
		return nil, fmt.Errorf("%w: type %d version %d (this binary knows %s)", ErrUnknownCommand, typ, version, knownVersion(info))
	}
	d := decoder{buf: b[commandHeaderSz:]}
	cmd := info.decode(version, &d)
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s v%d: %v", ErrCorruptCommand, info.name, version, d.err)
	}
	return cmd, nil
}

func knownVersion(info *commandInfo) string {
	if info == nil {
		return "no such type"
	}
	return fmt.Sprintf("%s up to v%d", info.name, info.version)
}
