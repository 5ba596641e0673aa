package queuey

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/queuey-go/queuey/mailbox"
)

// The hold actor keeps at most its limit of publishes in flight, starts a
// waiting one as each ends, and answers those still waiting when it stops,
// so that no asker waits for ever.
func TestTheHoldActorBoundsItsPublishesInFlight(t *testing.T) {
	synctest.Test(t, testHoldActorBounds)
}

func testHoldActorBounds(t *testing.T) {
	started := make(chan *settlement, 10)
	release := make(chan struct{})
	a := newHoldActor(holder{}, 2, func(s *settlement) error {
		started <- s
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	answers := mailbox.New[queueMsg](10)
	for i := range 5 {
		if err := a.tell(&settlement{ctx: t.Context(), run: i}, answers); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait() // everything that can happen has happened
	if n := len(started); n != 2 {
		t.Fatalf("%d publishes started with a limit of 2", n)
	}
	<-started
	<-started
	release <- struct{}{} // one ends: the third starts
	synctest.Wait()
	if n := len(started); n != 1 {
		t.Fatalf("%d publishes started after one ended, want 1", n)
	}
	<-started
	if m := <-answers.Receive(); m.(publishDone).err != nil {
		t.Fatalf("the first publish's answer: %v", m.(publishDone).err)
	}
	cancel()
	close(release) // the two in flight end
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if done, stopped := countAnswers(t, answers, 4); stopped != 2 || done != 2 {
		t.Errorf("answers after the stop: %d made, %d refused as stopped; want 2 and 2", done, stopped)
	}
}

// countAnswers reads n of the hold actor's answers: those made, and those
// refused because it stopped.
func countAnswers(t *testing.T, answers *mailbox.Mailbox[queueMsg], n int) (done, stopped int) {
	t.Helper()
	for range n {
		switch err := (<-answers.Receive()).(publishDone).err; {
		case errors.Is(err, errHoldStopped):
			stopped++
		case err == nil:
			done++
		default:
			t.Fatalf("an answer: %v", err)
		}
	}
	return done, stopped
}
