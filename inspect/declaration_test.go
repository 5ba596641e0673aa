package inspect_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/inspect"
)

func TestADeclarationIsTheQueueQueueyWouldDeclare(t *testing.T) {
	args := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		d    inspect.Declaration
		want queuey.Queue
	}{
		{"classic, the default priorities", inspect.Declaration{Type: "classic", Durable: true, Arguments: args("x-max-priority", json.Number("10"))},
			queuey.Queue{Name: "q", Type: queuey.Classic, MaxPriority: 10}},
		{"classic without priorities", inspect.Declaration{Type: "classic", Durable: true},
			queuey.Queue{Name: "q", Type: queuey.Classic, MaxPriority: queuey.NoPriorities}},
		{"transient with a TTL", inspect.Declaration{Type: "classic", Arguments: args("x-max-priority", json.Number("3"), "x-message-ttl", json.Number("1500"))},
			queuey.Queue{Name: "q", Type: queuey.Classic, MaxPriority: 3, Transient: true, MessageTTL: 1500 * time.Millisecond}},
		{"quorum", inspect.Declaration{Type: "quorum", Durable: true, Arguments: args("x-queue-type", "quorum")},
			queuey.Queue{Name: "q", Type: queuey.Quorum}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.d.Queue("q")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Queue (-want +got):\n%s", diff)
			}
		})
	}
}

func TestADeclarationQueueyCannotHaveMadeIsRefusedWithItsReason(t *testing.T) {
	tests := []struct {
		d    inspect.Declaration
		want string
	}{
		{inspect.Declaration{Name: "s", Type: "stream", Durable: true}, `queue "s" is a stream queue`},
		{inspect.Declaration{Name: "p", Type: "classic", Arguments: map[string]any{"x-max-priority": json.Number("300")}}, "x-max-priority 300"},
		{inspect.Declaration{Name: "t", Type: "classic", Arguments: map[string]any{"x-message-ttl": "soon"}}, "x-message-ttl soon"},
	}
	for _, tt := range tests {
		if _, err := tt.d.Queue("q"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Queue of %+v: got %v, want an error with %q", tt.d, err, tt.want)
		}
	}
}
