package queuey

import (
	"errors"

	"github.com/queuey-go/queuey/broker"
)

// Errors returned by the public API. Those shared with package broker are the
// same values, so errors.Is works whichever layer reported them.
var (
	// ErrUnknownQueue: the job's queue is not part of the QueueSet, or a wait
	// was asked on a backend through which the queue was never declared.
	ErrUnknownQueue = broker.ErrUnknownQueue
	// ErrDelayTooLong: a delay that rounds up past the longest hold (2^31-1
	// ms, about 24.8 days) is refused rather than shortened.
	ErrDelayTooLong = broker.ErrDelayTooLong
	// ErrInvalidDelay: a negative delay.
	ErrInvalidDelay = broker.ErrInvalidDelay
	// ErrInvalidName: a queue name the broker cannot take.
	ErrInvalidName = broker.ErrInvalidName
	// ErrClosed: the backend was closed.
	ErrClosed = broker.ErrClosed
	// ErrInUse: a queue's dead letters were being read by another reader
	// (DeadLetters).
	ErrInUse = broker.ErrInUse

	// ErrInvalidQueue: a Queue or QueueSet setting is out of range.
	ErrInvalidQueue = errors.New("queuey: invalid queue configuration")
	// ErrInvalidJob: a nil job, an empty or overlong kind, or a payload that
	// does not encode.
	ErrInvalidJob = errors.New("queuey: invalid job")
	// ErrMessageTooLarge: the encoded job is larger than the producer allows.
	ErrMessageTooLarge = errors.New("queuey: message too large")
	// ErrDuplicateHandler: a second handler for the same job kind.
	ErrDuplicateHandler = errors.New("queuey: duplicate handler")
	// ErrNoHandlers: a worker was run with no handler registered and no
	// schedule added.
	ErrNoHandlers = errors.New("queuey: worker has no handlers")
	// ErrWorkerStarted: handlers must be registered before Run.
	ErrWorkerStarted = errors.New("queuey: worker already started")
	// ErrWorkerStopped: a worker runs once.
	ErrWorkerStopped = errors.New("queuey: worker already ran")
	// ErrHandlersStillRunning: Run returned while handlers that ignored
	// their cancelled ctx still ran (see Worker.Run).
	ErrHandlersStillRunning = errors.New("queuey: handlers still running after the worker stopped")
)
