package queuey

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// ErrDuplicate: a unique job was not enqueued because a job with its
// uniqueness key is live (ready, held by a worker, running, or waiting for
// a retry or a deferral). It is a *DuplicateError, which names that job.
var ErrDuplicate = errors.New("queuey: a job with the same uniqueness key is live")

// DuplicateError says which live job holds the uniqueness key of a job
// that was not enqueued (nothing was published). It matches ErrDuplicate.
type DuplicateError struct {
	// Key is the uniqueness key.
	Key string
	// JobID is the live job's id; empty in the moment between another
	// producer taking the key and writing down its job's id.
	JobID string
}

// Error says the job was not enqueued, its key, and the live job's id.
func (e *DuplicateError) Error() string {
	holder := "a live job whose id is not yet known"
	if e.JobID != "" {
		holder = "live job " + e.JobID
	}
	return fmt.Sprintf("queuey: not enqueued: uniqueness key %q is held by %s", e.Key, holder)
}

// Is reports target == ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// MaxUniqueKeyBytes is the longest uniqueness key (UniqueKey): an AMQP
// short string, as tools show it beside the job.
const MaxUniqueKeyBytes = 255

// Headers that carry a unique job's key and window with the job, through
// its retries, deferrals, dead letter and replay (ARCHITECTURE.md §1,
// "Unique jobs").
const (
	headerUniqueKey    = "x-queuey-unique-key"
	headerUniqueWindow = "x-queuey-unique-window-ms"
)

// uniqueness is what Unique and UniqueKey ask of an enqueue: the key
// ("" for the job's content) and the window.
type uniqueness struct {
	key    string
	window time.Duration
	err    error // an option given twice, or a bad key
}

// Unique enqueues the job only if no job of the same kind and content
// (its payload's JSON) is live, and keeps other such jobs out for as long
// as this one lives, or window at most: the key is let go when the job
// succeeds or is dead-lettered, or when window ends, whatever the job is
// doing. A job refused so is a *DuplicateError naming the live job's id,
// and nothing is published. window is rounded up to the millisecond.
func Unique(window time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.setUnique(uniqueness{window: window}) }
}

// UniqueKey is Unique with a key of the caller's, such as "sync-user-42":
// jobs of any kind with the same key in the same queue set exclude each
// other. A key is 1 to MaxUniqueKeyBytes bytes of UTF-8 without control
// characters.
func UniqueKey(key string, window time.Duration) EnqueueOption {
	return func(o *enqueueOptions) {
		if err := checkUniqueKey(key); err != nil {
			o.unique = &uniqueness{err: err}
			return
		}
		o.setUnique(uniqueness{key: key, window: window})
	}
}

func (o *enqueueOptions) setUnique(u uniqueness) {
	if o.unique != nil {
		u.err = fmt.Errorf("%w: Unique or UniqueKey given twice", ErrInvalidJob)
	}
	o.unique = &u
}

// checkUniqueKey refuses a key that cannot be carried and shown as it is.
func checkUniqueKey(key string) error { return checkText("uniqueness key", key, MaxUniqueKeyBytes) }

// headers are the headers that carry u with env's job, once its window
// is checked and its key made (from env's kind and payload, if u has
// none).
func (u *uniqueness) headers(env broker.Envelope) (map[string]string, error) {
	if u.err != nil {
		return nil, u.err
	}
	window := u.window.Round(time.Millisecond)
	if window < u.window {
		window += time.Millisecond
	}
	if window <= 0 || window > broker.MaxKeyTTL {
		return nil, fmt.Errorf("%w: uniqueness window %v is not in (0, %v]", ErrInvalidDelay, u.window, broker.MaxKeyTTL)
	}
	key := u.key
	if key == "" {
		sum := sha256.Sum256(env.Payload)
		key = env.JobType + ":" + base64.RawURLEncoding.EncodeToString(sum[:18])
	}
	return map[string]string{headerUniqueKey: key, headerUniqueWindow: strconv.FormatInt(window.Milliseconds(), 10)}, nil
}

// uniqueOf reads a unique job's key and window from its headers; ok is
// false for a job that is not unique.
func uniqueOf(headers map[string]string) (key string, window time.Duration, ok bool) {
	key, ok = headers[headerUniqueKey]
	if !ok {
		return "", 0, false
	}
	ms, err := strconv.ParseInt(headers[headerUniqueWindow], 10, 64)
	if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > broker.MaxKeyTTL {
		ms = broker.MaxKeyTTL.Milliseconds() // a header changed by hand: the longest, so as not to let a duplicate in
	}
	return key, time.Duration(ms) * time.Millisecond, true
}

// keyLocker is the set's backend as a broker.KeyLocker.
func keyLocker(b broker.Backend) (broker.KeyLocker, error) {
	k, ok := b.(broker.KeyLocker)
	if !ok {
		return nil, fmt.Errorf("%w: backend %T keeps no uniqueness keys (broker.KeyLocker)", ErrInvalidJob, b)
	}
	return k, nil
}

// withKey runs publish, the publish of env with headers, holding env's
// uniqueness key for its job if headers give it one: taken first (a key
// another job holds is a *DuplicateError, and nothing is published), let
// go again if the publish fails.
func (p *Producer) withKey(ctx context.Context, env broker.Envelope, headers map[string]string, publish func() error) error {
	key, window, ok := uniqueOf(headers)
	if !ok {
		return publish()
	}
	k, err := keyLocker(p.backend)
	if err != nil {
		return err
	}
	name := broker.KeyLockName(p.set.prefix, key)
	if n := len(broker.KeyHolderName(name)); n > broker.MaxNameBytes {
		return fmt.Errorf("%w: a uniqueness key's queues, %q and its holder, need %d bytes, over %d: the queue set's prefix is too long for unique jobs",
			ErrInvalidName, name, n, broker.MaxNameBytes)
	}
	holder, err := k.TakeKey(ctx, name, env.JobID, window)
	if err != nil {
		return fmt.Errorf("take uniqueness key %q of %s: %w", key, env.JobType, err)
	}
	if holder != env.JobID {
		return &DuplicateError{Key: key, JobID: holder}
	}
	if err := publish(); err != nil {
		undo, cancel := p.clock.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if rerr := k.ReleaseKey(undo, name, env.JobID); rerr != nil {
			err = fmt.Errorf("%w (and letting its uniqueness key %q go failed, so it stays held for its window: %v)", err, key, rerr)
		}
		return err
	}
	return nil
}

// releaseTimeout bounds the release of a key once a job has ended.
const releaseTimeout = 10 * time.Second

// releaseKey lets the uniqueness key of s's job go, if it has one: s's
// delivery was acked after a success, or after its dead letter was
// confirmed. A release that fails leaves the key to end with its window.
func (st *settler) releaseKey(s *settlement) {
	if s.action != actAck && s.action != actDeadLetter {
		return
	}
	m := s.d.Message()
	key, _, ok := uniqueOf(m.Headers)
	if !ok {
		return
	}
	k, err := keyLocker(st.backend)
	if err == nil {
		ctx, cancel := st.clock.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		err = k.ReleaseKey(ctx, broker.KeyLockName(st.set.prefix, key), m.ID)
	}
	if err != nil {
		st.settleFailed(s.log, slog.LevelWarn, "release uniqueness key", err)
	}
}
