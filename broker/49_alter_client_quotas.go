package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AlterClientQuotas: v0-1
//
// KIP-546: sets (or, with remove, deletes) quota keys of user, client-id
// and (user, client-id) entities, a null name being the default entity.
// Each entry is checked as Kafka's controller does (quota_entity.go) and
// answered on its own: INVALID_REQUEST for an empty or repeated entity
// component, an empty name, an unknown entity type or key, a value not
// above 0 or a fractional byte rate; ip entities (connection rates) and
// request_percentage are refused too, as Sediment does not enforce them
// (controller_mutation_rate is enforced: quota_mutation.go). A removed key needs no check (Kafka
// ignores the value). validate_only stops after the checks. Each valid
// entry is one metadata command (metadata.ResourceClientQuota), committed
// through the controller before the answer. v1 flexible.

func init() { regKey(49, 0, 1).handler = handleAlterClientQuotas }

func handleAlterClientQuotas(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, entry := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		comps := make([]quotaComponent, 0, len(entry.Entity))
		for _, c := range entry.Entity {
			ee := kmsg.NewAlterClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = c.Type, c.Name
			re.Entity = append(re.Entity, ee)
			comps = append(comps, quotaComponent{c.Type, c.Name})
		}
		if err := b.alterClientQuota(ctx, comps, entry.Ops, req.ValidateOnly); err != nil {
			re.ErrorCode, re.ErrorMessage = errCode(err), errMessage(err)
		}
		resp.Entries = append(resp.Entries, re)
	}
	return &Reply{Msg: resp}, nil
}

func (b *Broker) alterClientQuota(ctx context.Context, comps []quotaComponent, ops []kmsg.AlterClientQuotasRequestEntryOp, validateOnly bool) error {
	e, err := parseQuotaEntity(comps)
	if err != nil {
		return err
	}
	cmd := &metadata.AlterConfigs{ResourceType: metadata.ResourceClientQuota, ResourceName: e.String()}
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.Key] {
			return errQuotaRequest("Duplicate quota key %s", op.Key)
		}
		seen[op.Key] = true
		if op.Key == "" {
			return errQuotaRequest("Invalid empty configuration key")
		}
		if op.Remove {
			cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: op.Key, Delete: true})
			continue
		}
		if err := validateQuotaValue(e, op.Key, op.Value); err != nil {
			return err
		}
		cmd.Ops = append(cmd.Ops, metadata.ConfigOp{Key: op.Key, Value: formatQuotaValue(op.Value)})
	}
	if validateOnly || len(cmd.Ops) == 0 {
		return nil
	}
	_, _, err = b.store.propose(ctx, cmd)
	return err
}
