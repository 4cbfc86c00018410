package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// UpdateFeatures: v0-2 (flexible)
//
// KIP-584: sets finalized feature levels (features.go) for the whole
// cluster through the metadata log (metadata.UpdateFeatures), all of the
// request's updates or none, under ALTER on CLUSTER. Any broker takes it
// (the proposal goes to the Raft leader). Kafka's rules: a feature this
// broker does not serve, a level outside its range, a lower level without a
// downgrade type (v0 AllowDowngrade, v1+ UpgradeType 2 or 3) or a higher one
// with it is INVALID_UPDATE_VERSION for the whole request. v1:
// ValidateOnly checks and changes nothing. v0-1 repeat the request's error
// in a result per feature; v2 has only the top-level error.

func init() { regKey(57, 0, 2).handler = handleUpdateFeatures }

func handleUpdateFeatures(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.UpdateFeaturesRequest)
	resp := req.ResponseKind().(*kmsg.UpdateFeaturesResponse)
	updates := make([]metadata.FeatureUpdate, 0, len(req.FeatureUpdates))
	for _, u := range req.FeatureUpdates {
		t := metadata.FeatureUpgradeType(u.UpgradeType)
		if r.Version == 0 {
			t = metadata.FeatureUpgrade
			if u.AllowDowngrade {
				t = metadata.FeatureSafeDowngrade
			}
		}
		updates = append(updates, metadata.FeatureUpdate{Name: u.Feature, Level: u.MaxVersionLevel, Upgrade: t})
	}
	supported := b.supportedFeatures()
	var err error
	if len(updates) == 0 {
		// Nothing to change: Kafka's controller answers success.
	} else if req.ValidateOnly {
		err = metadata.CheckFeatureUpdates(b.meta.State(), updates, supported)
	} else {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		if timeout <= 0 || timeout > time.Minute {
			timeout = 30 * time.Second
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		// Checked here first too: a refusal needs no round through the
		// quorum (the command checks again against the state it applies to).
		if err = metadata.CheckFeatureUpdates(b.meta.State(), updates, supported); err == nil {
			_, _, err = b.store.propose(pctx, &metadata.UpdateFeatures{Updates: updates, Supported: supported})
		}
		if err == nil {
			b.log.Info("feature levels updated", "updates", updates)
		}
	}
	resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
	if r.Version <= 1 {
		for _, u := range req.FeatureUpdates {
			res := kmsg.NewUpdateFeaturesResponseResult()
			res.Feature, res.ErrorCode, res.ErrorMessage = u.Feature, resp.ErrorCode, resp.ErrorMessage
			resp.Results = append(resp.Results, res)
		}
	}
	return &Reply{Msg: resp}, nil
}
