package metadata

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/benbjohnson/immutable"
)

const (
	snapshotMagic   = "SDMS"
	snapshotVersion = 2
	// maxSnapshotBytes bounds what ReadSnapshot reads into memory.
	maxSnapshotBytes = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// EncodeSnapshot returns the snapshot encoding of s (layout in doc.go).
func EncodeSnapshot(s *State) []byte {
	e := encoder{buf: make([]byte, 0, 64+s.partitions*24)}
	e.buf = append(e.buf, snapshotMagic...)
	e.u8(snapshotVersion)
	e.uvarint(s.Version)
	e.str(s.ClusterID)
	e.varint(s.nextProducerID)
	e.uvarint(s.nextLeaseToken)

	e.uvarint(uint64(s.brokers.Len()))
	for _, b := range s.Brokers() {
		e.varint(int64(b.ID))
		e.uuid(b.IncarnationID)
		e.varint(b.Epoch)
		e.uvarint(uint64(len(b.Listeners)))
		for _, l := range b.Listeners {
			e.str(l.Name)
			e.str(l.Host)
			e.varint(int64(l.Port))
			e.varint(int64(l.SecurityProtocol))
		}
		e.str(b.Rack)
		e.bool(b.Fenced)
		e.bool(b.InControlledShutdown)
		e.varint(b.LastHeartbeatMs)
	}

	keys := sortedKeys(s.brokerConfigs)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		e.strMap(s.brokerConfigs[k])
	}

	e.uvarint(uint64(s.topics.Len()))
	for it := s.topics.Iterator(); !it.Done(); {
		_, t, _ := it.Next()
		e.uuid(t.ID)
		e.str(t.Name)
		e.strMap(t.Configs)
		e.uvarint(uint64(len(t.Partitions)))
		for _, p := range t.Partitions {
			e.int32s(p.Replicas)
			e.int32s(p.ISR)
			e.varint(int64(p.Leader))
			e.varint(int64(p.LeaderEpoch))
			e.varint(int64(p.PartitionEpoch))
			e.str(p.Remote.ManifestKey)
			e.varint(p.Remote.ManifestVersion)
			e.varint(p.Remote.StartOffset)
			e.varint(p.Remote.EndOffset)
			e.varint(int64(p.Remote.LeaderEpoch))
			e.int32s(p.Adding)
			e.int32s(p.Removing)
		}
	}

	e.uvarint(uint64(s.leases.Len()))
	for _, l := range s.Leases() {
		e.str(l.Kind)
		e.str(l.Resource)
		e.str(l.Holder)
		e.uvarint(l.Token)
		e.varint(l.ExpiresMs)
	}
	e.u32(crc32c(e.buf))
	return e.buf
}

// ReadSnapshot reads a snapshot written by EncodeSnapshot.
func ReadSnapshot(r io.Reader) (*State, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, maxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	if n > maxSnapshotBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrCorruptSnapshot, maxSnapshotBytes)
	}
	return DecodeSnapshot(buf.Bytes())
}

// DecodeSnapshot parses a snapshot; any damage gives ErrCorruptSnapshot.
func DecodeSnapshot(b []byte) (*State, error) {
	if len(b) < len(snapshotMagic)+1+4 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32c(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptSnapshot)
	}
	v := body[len(snapshotMagic)]
	if v != 1 && v != snapshotVersion {
		return nil, fmt.Errorf("%w: format version %d, this binary reads %d", ErrCorruptSnapshot, v, snapshotVersion)
	}
	d := decoder{buf: body[len(snapshotMagic)+1:]}
	s := newState()
	s.Version = d.uvarint()
	s.ClusterID = d.str()
	s.nextProducerID = d.varint()
	s.nextLeaseToken = d.uvarint()

	brokers := immutable.NewSortedMapBuilder[int32, *Broker](nil)
	for range d.count(20) {
		b := &Broker{ID: d.int32(), IncarnationID: d.uuid(), Epoch: d.varint()}
		for range d.count(4) {
			l := Listener{Name: d.str(), Host: d.str(), Port: d.int32()}
			l.SecurityProtocol = int16(d.int32())
			b.Listeners = append(b.Listeners, l)
		}
		b.Rack = d.str()
		b.Fenced = d.bool()
		b.InControlledShutdown = d.bool()
		b.LastHeartbeatMs = d.varint()
		if _, dup := brokers.Get(b.ID); dup {
			d.fail(fmt.Errorf("broker %d twice", b.ID))
		}
		brokers.Set(b.ID, b)
	}
	s.brokers = brokers.Map()

	for range d.count(2) {
		k := d.str()
		m := d.strMap()
		if len(m) > 0 {
			s.brokerConfigs[k] = m
		}
	}
	s.acls = buildACLSet(s.brokerConfigs)

	topics := immutable.NewSortedMapBuilder[string, *Topic](nil)
	names := immutable.NewSortedMapBuilder[string, UUID](nil)
	for range d.count(19) {
		t := &Topic{ID: d.uuid(), Name: d.str(), Configs: d.strMap()}
		n := d.count(10)
		if n == 0 && d.err == nil {
			d.fail(fmt.Errorf("topic %q has no partitions", t.Name))
		}
		parts := make([]Partition, n)
		t.Partitions = make([]*Partition, n)
		for i := range parts {
			p := &parts[i]
			p.Index = int32(i)
			p.Replicas = d.int32s()
			p.ISR = d.int32s()
			p.Leader = d.int32()
			p.LeaderEpoch = d.int32()
			p.PartitionEpoch = d.int32()
			p.Remote.ManifestKey = d.str()
			p.Remote.ManifestVersion = d.varint()
			p.Remote.StartOffset = d.varint()
			p.Remote.EndOffset = d.varint()
			p.Remote.LeaderEpoch = d.int32()
			if v >= 2 {
				p.Adding = d.int32s()
				p.Removing = d.int32s()
			}
			if len(p.Replicas) == 0 && d.err == nil {
				d.fail(fmt.Errorf("topic %q partition %d has no replicas", t.Name, i))
			}
			t.Partitions[i] = p
		}
		if _, dup := names.Get(t.Name); dup {
			d.fail(fmt.Errorf("topic %q twice", t.Name))
		}
		if _, dup := topics.Get(string(t.ID[:])); dup {
			d.fail(fmt.Errorf("topic id %s twice", t.ID))
		}
		topics.Set(string(t.ID[:]), t)
		names.Set(t.Name, t.ID)
		s.partitions += n
	}
	s.topics = topics.Map()
	s.names = names.Map()

	leases := immutable.NewSortedMapBuilder[string, *Lease](nil)
	for range d.count(5) {
		l := &Lease{Kind: d.str(), Resource: d.str(), Holder: d.str(), Token: d.uvarint(), ExpiresMs: d.varint()}
		leases.Set(leaseKey(l.Kind, l.Resource), l)
	}
	s.leases = leases.Map()
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, d.err)
	}
	return s, nil
}
