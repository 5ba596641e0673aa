package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/queuey-go/queuey"
)

// Job is the suite's one kind of job. What it does is in its fields, so the
// worker program needs no per-test code.
type Job struct {
	// Seq numbers the jobs of one run, for messages a person reads.
	Seq int `json:"seq"`
	// WorkMs is how long the handler works.
	WorkMs int `json:"work_ms,omitempty"`
	// FailOnce makes the first attempt fail (a retryable error).
	FailOnce bool `json:"fail_once,omitempty"`
	// Fail makes every attempt fail: the job ends in the dead letters.
	Fail bool `json:"fail,omitempty"`
	// Crash makes the handler end its worker process (os.Exit(1)) every
	// time it runs: a poison job.
	Crash bool `json:"crash,omitempty"`
	// SlowFirstMs, when set, replaces WorkMs on a delivery that is not a
	// redelivery: a job that outlives the broker's consumer_timeout once.
	SlowFirstMs int `json:"slow_first_ms,omitempty"`
	// NotBefore is the unix time in nanoseconds before which the job must
	// not start: when Enqueue was called, plus the delay asked for.
	NotBefore int64 `json:"not_before,omitempty"`
	// Pad makes the message bigger.
	Pad string `json:"pad,omitempty"`
}

// Kind is "chaos".
func (Job) Kind() string { return "chaos" }

// Queue is the work queue; its settings come from QueueSet.
func (Job) Queue() queuey.Queue { return queuey.Queue{Name: WorkQueue} }

// WorkQueue is the name (within the set) of the suite's work queue.
const WorkQueue = "work"

// RetryBackoff is the wait before a failed job's second attempt.
const RetryBackoff = time.Second

// QueueSet is the queue set every process of a run uses: the same
// declaration everywhere (priorities, durability), a retry policy of three
// attempts one second apart.
func QueueSet(prefix string, prefetch int) queuey.QueueSet {
	return queuey.QueueSet{
		Prefix: prefix,
		Queues: []queuey.Queue{{
			Name:     WorkQueue,
			Prefetch: prefetch,
			Retry:    &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(RetryBackoff)},
		}},
	}
}

// Events a worker writes to its ledger.
const (
	EvStart   = "start"   // a handler started
	EvDone    = "done"    // a handler returned (Err says how)
	EvSettled = "settled" // the broker was told (Result, SettleErr)
	EvExit    = "exit"    // the worker process stopped gracefully
)

// Record is one line of a worker's ledger.
type Record struct {
	Ev          string `json:"ev"`
	ID          string `json:"id,omitempty"`
	Seq         int    `json:"seq,omitempty"`
	Attempt     int    `json:"attempt,omitempty"`
	Redelivered bool   `json:"redelivered,omitempty"`
	At          int64  `json:"at"` // unix ns
	// EnqueuedAt is the job's enqueue time, unix ms (a start's): for a
	// scheduled job, its tick.
	EnqueuedAt int64 `json:"enqueued_at,omitempty"`
	PID        int   `json:"pid"`
	// Err is a done record's handler error.
	Err string `json:"err,omitempty"`
	// Result, Ran and SettleErr describe a settled record.
	Result    string `json:"result,omitempty"`
	Ran       bool   `json:"ran,omitempty"`
	SettleErr string `json:"settle_err,omitempty"`
	// NotBefore is copied from the job, on start records.
	NotBefore int64 `json:"not_before,omitempty"`
	// An exit record's goroutine counts: at start (before dialing) and
	// after the backend was closed; Settles is Worker.SettleFailures and
	// RunErr what Run returned.
	StoppedAt      int64  `json:"stopped_at,omitempty"` // when Run returned, unix ns
	BaseGoroutines int    `json:"base_goroutines,omitempty"`
	Goroutines     int    `json:"goroutines,omitempty"`
	SettleFailures uint64 `json:"settle_failures,omitempty"`
	RunErr         string `json:"run_err,omitempty"`
}

// Time is the record's time.
func (r Record) Time() time.Time { return time.Unix(0, r.At) }

// Ledger appends records to a file, one JSON line per write(2) with
// O_APPEND, so that what a handler wrote survives a SIGKILL of its process
// (the page cache keeps it).
type Ledger struct {
	mu  sync.Mutex
	f   *os.File
	pid int
}

// OpenLedger opens (creating) the ledger at path for appending.
func OpenLedger(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &Ledger{f: f, pid: os.Getpid()}, nil
}

// Write appends r, stamped with the process id and, if unset, the time.
func (l *Ledger) Write(r Record) {
	if r.At == 0 {
		r.At = time.Now().UnixNano()
	}
	r.PID = l.pid
	line, _ := json.Marshal(r) // a Record always encodes
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(line); err != nil {
		fmt.Fprintln(os.Stderr, "chaos ledger:", err)
	}
}

// Close closes the file.
func (l *Ledger) Close() error { return l.f.Close() }

// ReadLedgers reads every record of the files at paths, in file order. A
// last line cut short by a kill is skipped.
func ReadLedgers(paths ...string) ([]Record, error) {
	var out []Record
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r Record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				out = append(out, r)
			}
		}
	}
	return out, nil
}
