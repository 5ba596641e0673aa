package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// deadLetter puts one dead letter of kind "a" in the fixture's
// dead-letter queue, and returns its job id.
func (f *fixture) deadLetter(t *testing.T) string {
	t.Helper()
	backend := f.dial(t)
	defer backend.Close()
	env := broker.NewEnvelope("a", f.queue, json.RawMessage(`{"n":1}`), time.Now())
	msg, err := env.Message()
	must(t, err)
	must(t, backend.DeadLetter(t.Context(), broker.DeadLetter{Message: msg, Reason: "fatal: upstream said no"}))
	return env.JobID
}

// quorumFixture is newFixture for a quorum queue, whose lane goes too
// when the test ends (the delay levels are shared by every quorum queue
// of the broker, and stay).
func quorumFixture(t *testing.T, name string) *fixture {
	t.Helper()
	f := newFixture(t, queuey.Queue{Name: name, Type: queuey.Quorum})
	t.Cleanup(func() { f.deleteQueues(t, []string{broker.LaneQueueName(f.queue)}) })
	return f
}

// With RabbitMQ's management API, the operator names only the queue: its
// type, priorities, TTL and durability are the broker's, for classic and
// quorum queues alike (a single node declares quorum queues too), and a
// dead letter is listed and replayed into its queue.
func TestEachQueuesDeclarationIsReadFromTheBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		q    queuey.Queue
	}{
		{"classic", queuey.Queue{Name: "classic"}},
		{"classic without priorities", queuey.Queue{Name: "plain", MaxPriority: queuey.NoPriorities}},
		{"classic with 5 priorities", queuey.Queue{Name: "five", MaxPriority: 5}},
		{"transient with a TTL", queuey.Queue{Name: "brief", Transient: true, MessageTTL: time.Minute}},
		{"quorum", queuey.Queue{Name: "replicated", Type: queuey.Quorum}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f *fixture
			if tc.q.Type == queuey.Quorum {
				f = quorumFixture(t, tc.q.Name)
			} else {
				f = newFixture(t, tc.q)
			}
			id := f.deadLetter(t)
			if list := f.listed(t); len(list) != 1 || list[0].ID != id {
				t.Fatalf("list -json: %+v, want the one dead letter %s", list, id)
			}
			r := cli(t, "", f.args("replay", "-all", "-yes")...)
			if r.code != exitOK || !strings.Contains(r.stderr, "replayed 1 dead letter to "+f.queue) {
				t.Fatalf("replay -all: exit %d, stderr %q; want 0 and one replayed", r.code, r.stderr)
			}
			if got := f.take(t, f.queue); len(got) != 1 || got[0].JobID != id {
				t.Errorf("%s holds %d jobs after the replay, want the replayed %s", f.queue, len(got), id)
			}
		})
	}
}

// Without the management API, AMQP tells only that a queue exists: the
// refusal names the one flag that says what the broker has, and nothing
// else; with it, the command works.
func TestWithoutTheManagementAPITheRefusalNamesTheFlagThatFixesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		q        queuey.Queue
		api      string   // -management
		want     string   // in the hint
		others   []string // flags the hint must not name
		fixed    []string // the flags that make it work
		whyknown string   // why the declaration was not read, in the hint
	}{
		{"quorum", queuey.Queue{Name: "replicated", Type: queuey.Quorum}, "off", "give -type quorum",
			[]string{"-max-priority", "-transient", "-message-ttl"}, []string{"-type", "quorum"}, "-management off"},
		{"without priorities", queuey.Queue{Name: "plain", MaxPriority: queuey.NoPriorities}, "off", "give -max-priority",
			[]string{"-type", "-transient", "-message-ttl"}, []string{"-max-priority", "-1"}, "-management off"},
		{"an API that does not answer", queuey.Queue{Name: "plain", MaxPriority: queuey.NoPriorities}, "http://127.0.0.1:1", "give -max-priority",
			[]string{"-type", "-transient", "-message-ttl"}, []string{"-max-priority", "-1"}, "could not be read"},
		{"transient", queuey.Queue{Name: "brief", Transient: true}, "off", "give -transient",
			[]string{"-type", "-max-priority", "-message-ttl"}, []string{"-transient"}, "-management off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f *fixture
			if tc.q.Type == queuey.Quorum {
				f = quorumFixture(t, tc.q.Name)
			} else {
				f = newFixture(t, tc.q)
			}
			r := cli(t, "", f.args("list", "-management", tc.api)...)
			_, hint, _ := strings.Cut(r.stderr, "nothing was changed;")
			if r.code != exitError || !strings.Contains(r.stderr, "PRECONDITION_FAILED") || !strings.Contains(hint, tc.want) || !strings.Contains(hint, tc.whyknown) {
				t.Errorf("exit %d, hint %q; want 1, PRECONDITION_FAILED, %q and %q", r.code, hint, tc.want, tc.whyknown)
			}
			for _, other := range tc.others {
				if strings.Contains(hint, other) {
					t.Errorf("the hint %q names %s, which cannot fix it", hint, other)
				}
			}
			r = cli(t, "", f.args("list", append([]string{"-management", tc.api}, tc.fixed...)...)...)
			if r.code != exitOK || !strings.HasPrefix(r.stdout, "no dead letters in ") {
				t.Errorf("with %v: exit %d, stdout %q; want 0 and no dead letters", tc.fixed, r.code, r.stdout)
			}
		})
	}
}

// A flag given over what the broker tells is an override; one that
// contradicts the broker is refused, and the hint says to leave it out.
func TestAFlagThatContradictsTheBrokerIsToBeLeftOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, queuey.Queue{Name: "plain", MaxPriority: queuey.NoPriorities})
	r := cli(t, "", f.args("list", "-max-priority", "5")...)
	if _, hint, _ := strings.Cut(r.stderr, "nothing was changed;"); r.code != exitError || !strings.Contains(hint, "leave out -max-priority") {
		t.Errorf("exit %d, hint %q; want 1 and to leave out -max-priority", r.code, hint)
	}
	r = cli(t, "", f.args("list", "-max-priority", "-1")...)
	if r.code != exitOK {
		t.Errorf("with the override the broker agrees with: exit %d, want 0", r.code)
	}
}

func TestABadTypeIsAUsageError(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "dead", "list", "-queue", "q", "-type", "stream")
	if r.code != exitUsage || !strings.Contains(r.stderr, `-type "stream" is neither classic nor quorum`) {
		t.Errorf("exit %d, stderr %q; want 2 and the reason", r.code, r.stderr)
	}
}
