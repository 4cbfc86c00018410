package broker

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The admin audit log: every request that changes the cluster (topics,
// configs, partitions, reassignments, records deleted, ACLs, users, quotas,
// groups deleted, features, brokers and voters) is logged at INFO once
// answered, with who sent it (principal, client id, address) and what came
// of each resource, as Kafka's controller logs "CreateTopics result(s): …"
// and its config, ACL and feature changes. Validate-only requests change
// nothing and are logged at DEBUG. Refusals (an ACL denial, a bad config)
// are logged too: they are what an audit looks for.

// auditSummaries renders a request and its answer as one line's result, per
// API; only these APIs are audited.
var auditSummaries = map[int16]func(kmsg.Request, kmsg.Response) (result string, validateOnly bool){
	kmsg.CreateTopics.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.CreateTopicsRequest), p.(*kmsg.CreateTopicsResponse)
		var out auditList
		for _, t := range resp.Topics {
			out.add(fmt.Sprintf("%s (id %s, %d partitions, replication factor %d)", t.Topic, topicIDString(t.TopicID), t.NumPartitions, t.ReplicationFactor), t.ErrorCode)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.DeleteTopics.Int16(): func(_ kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		for _, t := range p.(*kmsg.DeleteTopicsResponse).Topics {
			name := topicIDString(t.TopicID)
			if t.Topic != nil {
				name = *t.Topic + " (id " + name + ")"
			}
			out.add(name, t.ErrorCode)
		}
		return out.String(), false
	},
	kmsg.CreatePartitions.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.CreatePartitionsRequest), p.(*kmsg.CreatePartitionsResponse)
		count := map[string]int32{}
		for _, t := range req.Topics {
			count[t.Topic] = t.Count
		}
		var out auditList
		for _, t := range resp.Topics {
			out.add(fmt.Sprintf("%s to %d partitions", t.Topic, count[t.Topic]), t.ErrorCode)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.IncrementalAlterConfigs.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.IncrementalAlterConfigsRequest), p.(*kmsg.IncrementalAlterConfigsResponse)
		changes := map[string]string{}
		for _, r := range req.Resources {
			var cs []string
			for _, c := range r.Configs {
				switch {
				case c.Op == kmsg.IncrementalAlterConfigOpDelete || c.Value == nil:
					cs = append(cs, c.Name+" "+strings.ToLower(c.Op.String()))
				default:
					cs = append(cs, c.Name+" "+strings.ToLower(c.Op.String())+" "+auditConfigValue(c.Name, *c.Value))
				}
			}
			changes[auditResource(r.ResourceType, r.ResourceName)] = strings.Join(cs, ", ")
		}
		var out auditList
		for _, r := range resp.Resources {
			out.addResource(changes, r.ResourceType, r.ResourceName, r.ErrorCode)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.AlterConfigs.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.AlterConfigsRequest), p.(*kmsg.AlterConfigsResponse)
		changes := map[string]string{}
		for _, r := range req.Resources {
			var cs []string
			for _, c := range r.Configs {
				v := "null"
				if c.Value != nil {
					v = auditConfigValue(c.Name, *c.Value)
				}
				cs = append(cs, c.Name+"="+v)
			}
			changes[auditResource(r.ResourceType, r.ResourceName)] = "set to " + strings.Join(cs, ", ")
		}
		var out auditList
		for _, r := range resp.Resources {
			out.addResource(changes, r.ResourceType, r.ResourceName, r.ErrorCode)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.AlterPartitionAssignments.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.AlterPartitionAssignmentsRequest), p.(*kmsg.AlterPartitionAssignmentsResponse)
		replicas := map[string][]int32{}
		for _, t := range req.Topics {
			for _, pt := range t.Partitions {
				replicas[fmt.Sprintf("%s-%d", t.Topic, pt.Partition)] = pt.Replicas
			}
		}
		var out auditList
		if resp.ErrorCode != 0 {
			out.add("all", resp.ErrorCode)
		}
		for _, t := range resp.Topics {
			for _, pt := range t.Partitions {
				name := fmt.Sprintf("%s-%d", t.Topic, pt.Partition)
				if r := replicas[name]; r == nil {
					name += " cancelled"
				} else {
					name += fmt.Sprintf(" to %v", r)
				}
				out.add(name, pt.ErrorCode)
			}
		}
		return out.String(), false
	},
	kmsg.DeleteRecords.Int16(): func(_ kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		for _, t := range p.(*kmsg.DeleteRecordsResponse).Topics {
			for _, pt := range t.Partitions {
				out.add(fmt.Sprintf("%s-%d before %d", t.Topic, pt.Partition, pt.LowWatermark), pt.ErrorCode)
			}
		}
		return out.String(), false
	},
	kmsg.CreateACLs.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.CreateACLsRequest), p.(*kmsg.CreateACLsResponse)
		var out auditList
		for i, c := range req.Creations {
			code := int16(0)
			if i < len(resp.Results) {
				code = resp.Results[i].ErrorCode
			}
			out.add(fmt.Sprintf("%s %s %s on %s %s (%s) from %s", c.PermissionType, c.Principal, c.Operation,
				c.ResourceType, c.ResourceName, c.ResourcePatternType, c.Host), code)
		}
		return out.String(), false
	},
	kmsg.DeleteACLs.Int16(): func(_ kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		for _, r := range p.(*kmsg.DeleteACLsResponse).Results {
			for _, m := range r.MatchingACLs {
				out.add(fmt.Sprintf("%s %s %s on %s %s (%s) from %s", m.PermissionType, m.Principal, m.Operation,
					m.ResourceType, m.ResourceName, m.ResourcePatternType, m.Host), m.ErrorCode)
			}
			if r.ErrorCode != 0 || len(r.MatchingACLs) == 0 {
				out.add("filter matching none", r.ErrorCode)
			}
		}
		return out.String(), false
	},
	kmsg.AlterUserSCRAMCredentials.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.AlterUserSCRAMCredentialsRequest), p.(*kmsg.AlterUserSCRAMCredentialsResponse)
		what := map[string][]string{}
		for _, u := range req.Upsertions {
			what[u.Name] = append(what[u.Name], fmt.Sprintf("set mechanism %d", u.Mechanism))
		}
		for _, d := range req.Deletions {
			what[d.Name] = append(what[d.Name], fmt.Sprintf("deleted mechanism %d", d.Mechanism))
		}
		var out auditList
		for _, r := range resp.Results {
			out.add("user "+r.User+": "+strings.Join(what[r.User], ", "), r.ErrorCode)
		}
		return out.String(), false
	},
	kmsg.AlterClientQuotas.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.AlterClientQuotasRequest), p.(*kmsg.AlterClientQuotasResponse)
		var out auditList
		for i, e := range req.Entries {
			var ent, ops []string
			for _, c := range e.Entity {
				name := "<default>"
				if c.Name != nil {
					name = *c.Name
				}
				ent = append(ent, c.Type+"="+name)
			}
			for _, o := range e.Ops {
				if o.Remove {
					ops = append(ops, o.Key+" removed")
				} else {
					ops = append(ops, fmt.Sprintf("%s=%v", o.Key, o.Value))
				}
			}
			code := int16(0)
			if i < len(resp.Entries) {
				code = resp.Entries[i].ErrorCode
			}
			out.add("{"+strings.Join(ent, ",")+"} "+strings.Join(ops, ", "), code)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.DeleteGroups.Int16(): func(_ kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		for _, g := range p.(*kmsg.DeleteGroupsResponse).Groups {
			out.add("group "+g.Group, g.ErrorCode)
		}
		return out.String(), false
	},
	kmsg.UpdateFeatures.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		req, resp := q.(*kmsg.UpdateFeaturesRequest), p.(*kmsg.UpdateFeaturesResponse)
		level := map[string]int16{}
		for _, f := range req.FeatureUpdates {
			level[f.Feature] = f.MaxVersionLevel
		}
		var out auditList
		if resp.ErrorCode != 0 {
			out.add("all", resp.ErrorCode)
		}
		for _, r := range resp.Results {
			out.add(fmt.Sprintf("%s to level %d", r.Feature, level[r.Feature]), r.ErrorCode)
		}
		return out.String(), req.ValidateOnly
	},
	kmsg.ElectLeaders.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		resp := p.(*kmsg.ElectLeadersResponse)
		if resp.ErrorCode != 0 {
			out.add("all", resp.ErrorCode)
		}
		for _, t := range resp.Topics {
			for _, pt := range t.Partitions {
				kind := "preferred"
				if q.(*kmsg.ElectLeadersRequest).ElectionType == 1 {
					kind = "unclean"
				}
				out.add(fmt.Sprintf("%s-%d (%s)", t.Topic, pt.Partition, kind), pt.ErrorCode)
			}
		}
		return out.String(), false
	},
	kmsg.UnregisterBroker.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		out.add(fmt.Sprintf("broker %d", q.(*kmsg.UnregisterBrokerRequest).BrokerID), p.(*kmsg.UnregisterBrokerResponse).ErrorCode)
		return out.String(), false
	},
	kmsg.AddRaftVoter.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		out.add(fmt.Sprintf("voter %d", q.(*kmsg.AddRaftVoterRequest).VoterID), p.(*kmsg.AddRaftVoterResponse).ErrorCode)
		return out.String(), false
	},
	kmsg.RemoveRaftVoter.Int16(): func(q kmsg.Request, p kmsg.Response) (string, bool) {
		var out auditList
		out.add(fmt.Sprintf("voter %d", q.(*kmsg.RemoveRaftVoterRequest).VoterID), p.(*kmsg.RemoveRaftVoterResponse).ErrorCode)
		return out.String(), false
	},
}

// auditList is a result line: "what: OK, what: ERROR_NAME", of at most
// about maxAuditLine bytes: the entries past it are counted, not written (a
// CreateTopics of a million entries made one line of 111 MB).
type auditList struct {
	b       strings.Builder
	omitted int
}

const maxAuditLine = 16 << 10

func (l *auditList) add(what string, code int16) {
	if l.b.Len() >= maxAuditLine {
		l.omitted++
		return
	}
	if l.b.Len() > 0 {
		l.b.WriteString("; ")
	}
	l.b.WriteString(what)
	l.b.WriteString(": ")
	if code == 0 {
		l.b.WriteString("OK")
	} else if e := kerr.ErrorForCode(code); e != nil {
		l.b.WriteString(kerrName(e))
	} else {
		fmt.Fprintf(&l.b, "error %d", code)
	}
}

// addResource adds a config resource's outcome with the changes asked of
// it (changes, by auditResource).
func (l *auditList) addResource(changes map[string]string, t kmsg.ConfigResourceType, name string, code int16) {
	key := auditResource(t, name)
	l.add(key+": "+changes[key], code)
}

func (l *auditList) String() string {
	if l.omitted > 0 {
		return fmt.Sprintf("%s; and %d more", l.b.String(), l.omitted)
	}
	return l.b.String()
}

func kerrName(err error) string {
	if ke, ok := err.(*kerr.Error); ok {
		return ke.Message
	}
	return err.Error()
}

// auditResource names a config resource: "TOPIC orders", "BROKER 2",
// "BROKER <default>".
func auditResource(t kmsg.ConfigResourceType, name string) string {
	if name == "" {
		name = "<default>"
	}
	return t.String() + " " + name
}

// auditConfigValue hides the values of secret configs (passwords, keys,
// JAAS settings) in the audit line.
func auditConfigValue(name, value string) string {
	n := strings.ToLower(name)
	for _, s := range []string{"password", "secret", "jaas", ".key", "credential", "token"} {
		if strings.Contains(n, s) {
			return "[hidden]"
		}
	}
	return value
}

// topicIDString writes a topic id as Kafka prints one (URL-safe base64).
func topicIDString(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// auditMiddleware logs the APIs of auditSummaries once answered; nil for
// the others.
func (b *Broker) auditMiddleware(key int16) Middleware {
	summarize, ok := auditSummaries[key]
	if !ok {
		return nil
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
			reply, err := next(ctx, b, r)
			if err != nil || reply == nil || reply.Msg == nil || reply.Msg.Key() != r.Key || r.Msg.Key() != r.Key {
				return reply, err // kmsg has one type per key: the summaries' assertions hold past this
			}
			// Summarized whatever the level (admin requests are rare), so
			// that the fuzz targets, which log at WARN, run it too.
			result, validateOnly := summarize(r.Msg, reply.Msg)
			lvl := slog.LevelInfo
			if validateOnly {
				lvl = slog.LevelDebug
			}
			if !b.log.Enabled(ctx, lvl) {
				return reply, err
			}
			attrs := []slog.Attr{slog.String("result", result)}
			if validateOnly {
				attrs = append(attrs, slog.Bool("validate_only", true))
			}
			if r.Conn != nil {
				attrs = append(attrs, slog.String("principal", "User:"+r.Conn.principal()), slog.String("remote", r.Conn.Remote.String()))
			}
			if r.ClientID != nil {
				attrs = append(attrs, slog.String("client_id", *r.ClientID))
			}
			b.log.LogAttrs(ctx, lvl, "admin: "+kmsg.NameForKey(r.Key), attrs...)
			return reply, err
		}
	}
}
