package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's fetch timing, as river's own benchmark (river bench, in its CLI)
// sets it for throughput: the defaults (a 100 ms cooldown between fetches,
// a poll every second) cap a queue far below what it can do. River allows
// down to 1 ms for both; these are the values its authors found best. The
// client's FetchCooldown also spaces the NOTIFY that inserts send to wake
// the workers: one at most every 2 ms per queue.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// riverBatch is how many jobs river-insertmany inserts per InsertMany call.
const riverBatch = 1000

type riverArgs struct {
	Pad string `json:"pad"`
}

func (riverArgs) Kind() string { return "peer" }

// setupRiver creates the database of pgURL if it does not exist (from the
// postgres database on the same server) and runs river's migrations up in
// it. main calls it once, before any run is measured.
func setupRiver(pgURL string) error {
	ctx := context.Background()
	poolCfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return fmt.Errorf("-pg: %w", err)
	}
	db := poolCfg.ConnConfig.Database
	admin := poolCfg.ConnConfig.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to the postgres database: %w", err)
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists)
	if err == nil && !exists {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42P04" {
			err = nil // created meanwhile by another run
		}
	}
	_ = conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// runRiver: river on PostgreSQL, a queue of its own with concurrency
// workers; each job is one Client.Insert, a transaction committed before
// it returns, from publishers goroutines: the load the others get.
func runRiver(cfg benchConfig) (float64, error) {
	return runRiverWith(cfg, "river", func(ctx context.Context, client *river.Client[pgx.Tx], queue string) error {
		opts := &river.InsertOpts{Queue: queue}
		return enqueueAll(cfg.publishers, cfg.n, func() error {
			_, err := client.Insert(ctx, riverArgs{Pad: pad}, opts)
			return err
		})
	})
}

// runRiverInsertMany: the same, but one caller inserting riverBatch jobs
// per InsertMany call (one transaction each), as river's docs recommend
// for bulk inserts: not the same load as the others.
func runRiverInsertMany(cfg benchConfig) (float64, error) {
	return runRiverWith(cfg, "river_insertmany", func(ctx context.Context, client *river.Client[pgx.Tx], queue string) error {
		opts := &river.InsertOpts{Queue: queue}
		batch := make([]river.InsertManyParams, 0, riverBatch)
		for i := range cfg.n {
			batch = append(batch, river.InsertManyParams{Args: riverArgs{Pad: pad}, InsertOpts: opts})
			if len(batch) == riverBatch || i == cfg.n-1 {
				if _, err := client.InsertMany(ctx, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		return nil
	})
}

// runRiverWith starts a river client working a queue of its own, calls
// enqueue, and waits for every job to be handled. The pool is pgxpool.New's,
// as in river's docs: at most max(4, NumCPU) connections unless -pg sets
// pool_max_conns (a pool with a connection per publisher was no faster
// here, and cost PostgreSQL about twice the CPU per job). The run's rows
// are deleted after.
func runRiverWith(cfg benchConfig, name string, enqueue func(context.Context, *river.Client[pgx.Tx], string) error) (float64, error) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.pgURL)
	if err != nil {
		return 0, fmt.Errorf("-pg: %w", err)
	}
	defer pool.Close()
	// River's queue names allow letters, digits, '_' and '-'.
	queue := strings.ReplaceAll(unique(name), ".", "_")
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, _ = pool.Exec(cctx, "DELETE FROM river_job WHERE queue = $1", queue)
		_, _ = pool.Exec(cctx, "DELETE FROM river_queue WHERE name = $1", queue)
	}()

	c := newCounter(cfg.n)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[riverArgs]) error {
		c.hit()
		return nil
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: cfg.concurrency}},
		Workers:           workers,
	})
	if err != nil {
		return 0, fmt.Errorf("river client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return 0, fmt.Errorf("river start: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = client.Stop(sctx) // the completer writes its last batch
	}()
	start := time.Now()
	if err := enqueue(ctx, client, queue); err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	if err := c.wait(5 * time.Minute); err != nil {
		return 0, err
	}
	return c.rate(start), nil
}
