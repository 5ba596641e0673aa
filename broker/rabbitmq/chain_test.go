package rabbitmq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
)

// A chain of three on RabbitMQ whose worker process is killed (SIGKILL)
// while it runs the second step, the first done: the ledger of steps,
// across the killed process and the worker after it, has every step, in
// order, none skipped; the second step comes back redelivered.
func TestAChainOnRabbitMQSurvivesItsWorkerKilledBetweenSteps(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	chain, err := r.producer.EnqueueChain(t.Context(), job{Name: "one"}, job{Name: "block-two"}, job{Name: "three", Fail: 1, Attempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ledger []string
	for _, line := range killWorkerWhenItRuns(t, r.prefix, " block-two") {
		ledger = append(ledger, line[strings.LastIndex(line, " ")+1:])
	}
	r.start(3) // two, three failing once, three again
	runs := r.wait(20 * time.Second)
	for _, run := range runs {
		ledger = append(ledger, run.Name)
		if run.Chain.ID != chain || run.Chain.Steps != 3 {
			t.Errorf("%s ran as %+v, want a step of %s", run.Name, run.Chain, chain)
		}
	}
	if diff := cmp.Diff([]string{"one", "block-two", "block-two", "three", "three"}, ledger); diff != "" {
		t.Errorf("steps run, across the kill, differ (-want +got):\n%s", diff)
	}
	if !runs[0].Redelivered || runs[0].Chain.Step != 2 || runs[2].Chain.Step != 3 || runs[2].Attempt != 2 {
		t.Errorf("after the kill: %+v", runs)
	}
	t.Logf("ledger: %s", strings.Join(ledger, ", "))
}
