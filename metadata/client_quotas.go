package metadata

// Client quotas (KIP-13, KIP-55, KIP-546) are kept as a non-topic config
// resource, ResourceClientQuota, in the same map as dynamic broker and
// group configs, under quotaConfigKey(entity): the snapshot format does not
// change. The entity string and the quota keys and values are the broker's
// (broker/quota_entity.go); the state machine only refuses an empty name.

// alterClientQuota applies an AlterConfigs of ResourceClientQuota: change
// maps the entity's current quotas to its new ones; an entity left with
// none is removed.
func (s *State) alterClientQuota(entity string, change func(map[string]string) map[string]string) (Result, error) {
	if entity == "" {
		return Result{}, reject(ErrInvalidRequest, "empty client quota entity")
	}
	key := quotaConfigKey(entity)
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
	return Result{}, nil
}
