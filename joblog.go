package queuey

import (
	"context"
	"log/slog"
)

// jobLog writes one job's log lines with its identity. It builds a line
// only when its level is enabled, so the path of a job that succeeds
// allocates nothing for logging it does not print.
type jobLog struct {
	l               *slog.Logger // nil: log nothing
	id, kind, queue string
	attempt         uint32
}

func (j jobLog) Debug(msg string, args ...any) { j.log(slog.LevelDebug, msg, args) }
func (j jobLog) Info(msg string, args ...any)  { j.log(slog.LevelInfo, msg, args) }
func (j jobLog) Warn(msg string, args ...any)  { j.log(slog.LevelWarn, msg, args) }
func (j jobLog) Error(msg string, args ...any) { j.log(slog.LevelError, msg, args) }

func (j jobLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if j.l == nil || !j.l.Enabled(ctx, level) {
		return
	}
	var attrs []any
	if j.id != "" {
		attrs = append(attrs, "job_id", j.id, "kind", j.kind)
	}
	attrs = append(attrs, "queue", j.queue)
	if j.attempt > 0 {
		attrs = append(attrs, "attempt", j.attempt)
	}
	j.l.Log(ctx, level, msg, append(attrs, args...)...)
}
