package queuey

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/queuey-go/queuey/broker"
)

// ChainStep says where a job stands in a chain (Producer.EnqueueChain).
// It is the zero value for a job that is not in one.
type ChainStep struct {
	// ID is the chain's id, the same for each of its steps.
	ID string
	// Step is this job's place in the chain, from 1; Steps the chain's
	// length.
	Step, Steps int
}

// chainMember is the envelope member "chain" that a chain's step carries:
// where it stands and the steps left after it. The broker package does
// not model it: it travels in the envelope's unknown members, which every
// republish (and the Rust crate) keeps as they are.
type chainMember struct {
	ID    string      `json:"id"`
	Step  int         `json:"step"`
	Steps int         `json:"steps"`
	Next  []chainNext `json:"next,omitempty"`
}

// chainNext is a step still to be enqueued: its kind, its work queue's
// broker name and its payload.
type chainNext struct {
	Kind    string          `json:"job_type"`
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
}

// EnqueueChain enqueues steps, jobs of any kinds and queues of the set,
// to run one after another: the first now, each next one once the one
// before it has succeeded (its publish confirmed before that step is
// acked, so a crash between them runs a step again, never skips one).
// Retries and deferrals inside a step are as for any job. A step that is
// dead-lettered stops the chain; its dead letter carries the steps left,
// and replaying it resumes the chain there. Every step is checked before
// anything is published. It returns the chain's id (ChainStep.ID) once
// the first step's publish is confirmed.
func (p *Producer) EnqueueChain(ctx context.Context, steps ...Job) (string, error) {
	if len(steps) == 0 {
		return "", fmt.Errorf("%w: a chain of no steps", ErrInvalidJob)
	}
	first, _, _, err := p.envelope(steps[0], nil)
	if err != nil {
		return "", fmt.Errorf("chain step 1: %w", err)
	}
	c := chainMember{ID: broker.NewJobID(), Step: 1, Steps: len(steps)}
	for i, job := range steps[1:] {
		env, _, _, err := p.envelope(job, nil)
		if err != nil {
			return "", fmt.Errorf("chain step %d: %w", i+2, err)
		}
		c.Next = append(c.Next, chainNext{Kind: env.JobType, Queue: env.Queue, Payload: env.Payload})
	}
	if first.Unknown, err = c.member(); err != nil {
		return "", err
	}
	if err := p.publish(ctx, first, false, nil); err != nil {
		return "", err
	}
	return c.ID, nil
}

// member is c as the envelope's unknown members: {"chain": c}.
func (c chainMember) member() (json.RawMessage, error) {
	b, err := json.Marshal(struct {
		Chain chainMember `json:"chain"`
	}{c})
	if err != nil {
		return nil, fmt.Errorf("%w: encode chain %s: %v", ErrInvalidJob, c.ID, err)
	}
	return b, nil
}

// chainOf reads env's chain member; ok is false for a job not in a chain
// (and for a member that does not read as one, which is then a plain
// job's own business).
func chainOf(env broker.Envelope) (c chainMember, ok bool) {
	if env.Unknown == nil {
		return c, false
	}
	var m struct {
		Chain *chainMember `json:"chain"`
	}
	if json.Unmarshal(env.Unknown, &m) != nil || m.Chain == nil || m.Chain.ID == "" {
		return c, false
	}
	return *m.Chain, true
}

// chainStepOf is where env's job stands in its chain, for its JobContext.
func chainStepOf(env broker.Envelope) ChainStep {
	c, ok := chainOf(env)
	if !ok {
		return ChainStep{}
	}
	return ChainStep{ID: c.ID, Step: c.Step, Steps: c.Steps}
}

// stepJobID is the job id of a chain's step after the first: a
// name-based UUID (version 5 layout) of the chain's id and the step, so
// that a step published twice (its step before ran again, after a crash
// between the publish and the ack) has one id, which a handler can key on.
func stepJobID(chain string, step int) string {
	sum := sha1.Sum([]byte("queuey chain\x00" + chain + "\x00" + strconv.Itoa(step)))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// succeeded settles a job that succeeded: an ack, or for a chain's step
// with steps left, the publish of the next step (then the ack, as a copy
// is settled: confirmed first, tried again on failure, and past its tries
// the step is requeued, to run again rather than be skipped).
func (r *jobRunner) succeeded(f *jobFacts) settlement {
	s := settlement{action: actAck, out: Outcome{Result: Succeeded}}
	c, ok := chainOf(f.env)
	if !ok || len(c.Next) == 0 {
		return s
	}
	n := c.Next[0]
	next := broker.NewEnvelope(n.Kind, n.Queue, n.Payload, r.clock.Now())
	next.JobID = stepJobID(c.ID, c.Step+1)
	next.CorrelationID = f.env.CorrelationID
	rest := chainMember{ID: c.ID, Step: c.Step + 1, Steps: c.Steps, Next: c.Next[1:]}
	var err error
	if next.Unknown, err = rest.member(); err == nil {
		s.msg, err = next.Message()
	}
	if err != nil {
		f.log.Error("could not encode the chain's next step; the chain stops here", "chain_id", c.ID, "error", err)
		return s
	}
	s.action, s.op = actCopy, OpChainStep
	return s
}
