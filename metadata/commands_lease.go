package metadata

import "strings"

func init() {
	register(TypeAcquireLease, commandInfo{name: "AcquireLease", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &AcquireLease{Kind: d.str(), Resource: d.str(), Holder: d.str(), NowMs: d.varint(), TTLMs: d.varint()}
	}})
	register(TypeRenewLease, commandInfo{name: "RenewLease", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &RenewLease{Kind: d.str(), Resource: d.str(), Holder: d.str(), Token: d.uvarint(), NowMs: d.varint(), TTLMs: d.varint()}
	}})
	register(TypeReleaseLease, commandInfo{name: "ReleaseLease", version: 1, decode: func(_ uint8, d *decoder) Command {
		return &ReleaseLease{Kind: d.str(), Resource: d.str(), Holder: d.str(), Token: d.uvarint()}
	}})
}

// AcquireLease takes the lease on (Kind, Resource) for TTLMs. It is refused
// with ErrLeaseHeld while another holder's lease is unexpired at NowMs. A new
// grant gets a fencing token larger than any issued before; the same holder
// re-acquiring an unexpired lease keeps its token. Expiry is computed from
// NowMs, a timestamp the proposer puts in the command, never from the
// applying node's clock.
type AcquireLease struct {
	Kind     string
	Resource string
	Holder   string
	NowMs    int64 // set by the proposer when zero
	TTLMs    int64
}

func (*AcquireLease) Type() CommandType { return TypeAcquireLease }
func (c *AcquireLease) encode(e *encoder) {
	e.str(c.Kind)
	e.str(c.Resource)
	e.str(c.Holder)
	e.varint(c.NowMs)
	e.varint(c.TTLMs)
}

func (c *AcquireLease) prepare(p *prepareContext) error {
	if c.NowMs == 0 {
		c.NowMs = p.nowMs
	}
	return nil
}

func (c *AcquireLease) apply(s *State, _ uint64) (Result, error) {
	if c.Kind == "" || c.Holder == "" || c.TTLMs <= 0 || strings.IndexByte(c.Kind, 0) >= 0 {
		return Result{}, reject(ErrInvalidRequest, "lease kind %q holder %q ttl %d", c.Kind, c.Holder, c.TTLMs)
	}
	key := leaseKey(c.Kind, c.Resource)
	old, ok := s.leases.Get(key)
	if ok && old.ExpiresMs > c.NowMs {
		if old.Holder != c.Holder {
			return Result{}, reject(ErrLeaseHeld, "%s/%s held by %s until %d", c.Kind, c.Resource, old.Holder, old.ExpiresMs)
		}
		l := *old
		l.ExpiresMs = max(old.ExpiresMs, c.NowMs+c.TTLMs)
		s.leases = s.leases.Set(key, &l)
		return Result{LeaseToken: l.Token, LeaseExpiresMs: l.ExpiresMs}, nil
	}
	l := &Lease{Kind: c.Kind, Resource: c.Resource, Holder: c.Holder, Token: s.nextLeaseToken, ExpiresMs: c.NowMs + c.TTLMs}
	s.nextLeaseToken++
	s.leases = s.leases.Set(key, l)
	return Result{LeaseToken: l.Token, LeaseExpiresMs: l.ExpiresMs}, nil
}

// RenewLease extends a lease its holder still holds: ErrLeaseLost if the
// holder or token does not match (someone else took it), ErrLeaseExpired if
// it expired at NowMs (the holder must acquire again and get a new token).
type RenewLease struct {
	Kind     string
	Resource string
	Holder   string
	Token    uint64
	NowMs    int64 // set by the proposer when zero
	TTLMs    int64
}

func (*RenewLease) Type() CommandType { return TypeRenewLease }
func (c *RenewLease) encode(e *encoder) {
	e.str(c.Kind)
	e.str(c.Resource)
	e.str(c.Holder)
	e.uvarint(c.Token)
	e.varint(c.NowMs)
	e.varint(c.TTLMs)
}

func (c *RenewLease) prepare(p *prepareContext) error {
	if c.NowMs == 0 {
		c.NowMs = p.nowMs
	}
	return nil
}

func (c *RenewLease) apply(s *State, _ uint64) (Result, error) {
	if c.TTLMs <= 0 {
		return Result{}, reject(ErrInvalidRequest, "lease ttl %d", c.TTLMs)
	}
	old, err := heldLease(s, c.Kind, c.Resource, c.Holder, c.Token)
	if err != nil {
		return Result{}, err
	}
	if old.ExpiresMs <= c.NowMs {
		return Result{}, reject(ErrLeaseExpired, "%s/%s expired at %d, now %d", c.Kind, c.Resource, old.ExpiresMs, c.NowMs)
	}
	l := *old
	l.ExpiresMs = max(old.ExpiresMs, c.NowMs+c.TTLMs)
	s.leases = s.leases.Set(leaseKey(c.Kind, c.Resource), &l)
	return Result{LeaseToken: l.Token, LeaseExpiresMs: l.ExpiresMs}, nil
}

// ReleaseLease gives a lease up; ErrLeaseLost if the holder or token does not
// match. Releasing an expired lease one still holds is allowed.
type ReleaseLease struct {
	Kind     string
	Resource string
	Holder   string
	Token    uint64
}

func (*ReleaseLease) Type() CommandType { return TypeReleaseLease }
func (c *ReleaseLease) encode(e *encoder) {
	e.str(c.Kind)
	e.str(c.Resource)
	e.str(c.Holder)
	e.uvarint(c.Token)
}

func (c *ReleaseLease) apply(s *State, _ uint64) (Result, error) {
	if _, err := heldLease(s, c.Kind, c.Resource, c.Holder, c.Token); err != nil {
		return Result{}, err
	}
	s.leases = s.leases.Delete(leaseKey(c.Kind, c.Resource))
	return Result{LeaseToken: c.Token}, nil
}

func heldLease(s *State, kind, resource, holder string, token uint64) (*Lease, error) {
	l, ok := s.leases.Get(leaseKey(kind, resource))
	if !ok {
		return nil, reject(ErrLeaseLost, "%s/%s is not held", kind, resource)
	}
	if l.Holder != holder || l.Token != token {
		return nil, reject(ErrLeaseLost, "%s/%s is held by %s with token %d", kind, resource, l.Holder, l.Token)
	}
	return l, nil
}
