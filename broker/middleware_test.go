package broker

import (
	"context"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMiddleware: the one hook for authentication, authorization and
// quotas sees every request with its connection, in configured order, and
// can answer in place of the handler (here: refuse CreateTopics as an
// authorizer would).
func TestMiddleware(t *testing.T) {
	var mu sync.Mutex
	var order []string
	seen := map[string]int{}
	trace := func(name string) Middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
				mu.Lock()
				order = append(order, name)
				if name == "outer" {
					seen[kmsg.NameForKey(r.Key)]++
					if r.Conn == nil || r.Conn.Listener != "PLAINTEXT" || r.Conn.Remote == nil {
						t.Errorf("connection info missing: %+v", r.Conn)
					}
				}
				mu.Unlock()
				return next(ctx, b, r)
			}
		}
	}
	deny := func(next Handler) Handler {
		return func(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
			req, ok := r.Msg.(*kmsg.CreateTopicsRequest)
			if !ok {
				return next(ctx, b, r)
			}
			resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
			for _, tp := range req.Topics {
				rt := kmsg.NewCreateTopicsResponseTopic()
				rt.Topic, rt.ErrorCode = tp.Topic, kerr.TopicAuthorizationFailed.Code
				resp.Topics = append(resp.Topics, rt)
			}
			return &Reply{Msg: resp}, nil
		}
	}
	b := startBroker(t, "", func(c *Config) { c.Middleware = []Middleware{trace("outer"), trace("inner"), deny} })
	adm := kadm.NewClient(newClient(t, b))
	resp, _ := adm.CreateTopic(testCtx(t), 1, 1, nil, "denied")
	if resp.Err != kerr.TopicAuthorizationFailed {
		t.Fatalf("create through the denying middleware: %v", resp.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["Metadata"] == 0 || seen["CreateTopics"] == 0 {
		t.Fatalf("requests seen: %v", seen)
	}
	for i := 0; i+1 < len(order); i += 2 {
		if order[i] != "outer" || order[i+1] != "inner" {
			t.Fatalf("middleware order: %v", order)
		}
	}
}
