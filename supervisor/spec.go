package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/benbjohnson/clock"
)

// Restart is a child's restart policy. Permanent is its only value.
type Restart int

// Permanent is the only policy: the child is restarted whenever it exits
// while its supervisor runs, whether it returned an error, returned nil or
// panicked. A child that keeps returning, even nil, exhausts the intensity.
// An exit caused by the supervisor stopping the child is not restarted.
const Permanent Restart = 0

// Child is one supervised unit of work.
type Child struct {
	// Name identifies the child in errors and logs; it must be unique
	// within the supervisor and not empty.
	Name string
	// Run does the work until ctx ends and then returns. A panic is
	// recovered and treated as an error (a *CrashError).
	Run func(ctx context.Context) error
	// Restart is the child's policy. Permanent, the zero value, is the only
	// policy: the child is restarted whenever it exits while its supervisor
	// runs.
	Restart Restart
}

// Spec configures a Supervisor. The zero value of every field selects its
// documented default.
type Spec struct {
	// Name identifies the supervisor in errors and logs.
	Name string
	// Intensity is how many restarts of one child within Period are
	// tolerated; the next one stops all children and Run returns an
	// *EscalationError. Default 5.
	Intensity int
	// Period is the window over which Intensity counts restarts; default 10s.
	Period time.Duration
	// MinBackoff is the base restart delay; default 100ms. The delay before
	// a child's n-th restart within Period is Rand() * min(MaxBackoff,
	// MinBackoff * 2^(n-1)) ("full jitter"), so that children crashing
	// together do not restart together.
	MinBackoff time.Duration
	// MaxBackoff caps the restart delay; default 10s.
	MaxBackoff time.Duration
	// ShutdownTimeout is how long Run waits for each child to return once
	// its ctx is cancelled; default 10s.
	ShutdownTimeout time.Duration
	// Clock times backoffs and shutdowns; nil means the real clock.
	Clock clock.Clock
	// Logger receives a WARN record per restart; nil means slog.Default(),
	// looked up when Run starts.
	Logger *slog.Logger
	// Rand returns the jitter factor in [0, 1]; nil means math/rand/v2's
	// Float64. It exists for deterministic tests of the backoff and should
	// be left nil otherwise. It is called from the Run loop only.
	Rand func() float64
}

func (s Spec) withDefaults() Spec {
	orDefault := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if s.Intensity == 0 {
		s.Intensity = 5
	}
	orDefault(&s.Period, 10*time.Second)
	orDefault(&s.MinBackoff, 100*time.Millisecond)
	orDefault(&s.MaxBackoff, 10*time.Second)
	orDefault(&s.ShutdownTimeout, 10*time.Second)
	if s.Clock == nil {
		s.Clock = clock.New()
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Rand == nil {
		s.Rand = rand.Float64
	}
	return s
}

// validate reports every problem with a defaulted spec and its children.
func (s Spec) validate(children []Child) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Intensity < 0 {
		bad("intensity %d is negative", s.Intensity)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"period", s.Period}, {"min backoff", s.MinBackoff}, {"max backoff", s.MaxBackoff}, {"shutdown timeout", s.ShutdownTimeout}} {
		if d.d < 0 {
			bad("%s %s is negative", d.name, d.d)
		}
	}
	if s.MinBackoff > s.MaxBackoff {
		bad("min backoff %s exceeds max backoff %s", s.MinBackoff, s.MaxBackoff)
	}
	seen := make(map[string]bool, len(children))
	for i, c := range children {
		switch {
		case c.Name == "":
			bad("child %d has no name", i)
		case seen[c.Name]:
			bad("child name %q is used twice", c.Name)
		}
		seen[c.Name] = true
		if c.Run == nil {
			bad("child %q has no Run", c.Name)
		}
		if c.Restart != Permanent {
			bad("child %q has unknown restart policy %d", c.Name, c.Restart)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("supervisor %s: invalid spec: %w", s.Name, err)
	}
	return nil
}

// backoff is the jittered delay before a child's n-th recent restart.
func (s Spec) backoff(n int) time.Duration {
	d := s.MinBackoff
	for ; n > 1 && d < s.MaxBackoff; n-- {
		d *= 2
	}
	return time.Duration(s.Rand() * float64(min(d, s.MaxBackoff)))
}
