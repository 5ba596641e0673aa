package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// serverVersions asks each server the selected systems use for its
// version: RabbitMQ's connection properties, Redis's INFO, PostgreSQL's
// server_version. A server that cannot be asked is reported with the
// error instead.
func serverVersions(cfg benchConfig, selected []system) map[string]string {
	out := map[string]string{}
	for _, s := range selected {
		switch s.server {
		case "beam.smp":
			out["RabbitMQ"] = orError(rabbitVersion(cfg.amqpURL))
		case "redis-server":
			out["Redis"] = orError(redisVersion(cfg.redisAddr))
		case "postgres":
			out["PostgreSQL"] = orError(postgresVersion(cfg.pgURL))
		}
	}
	return out
}

// orError is v, or the error in its place.
func orError(v string, err error) string {
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v
}

// rabbitVersion is the version the broker announces when a connection
// opens.
func rabbitVersion(url string) (string, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	v, _ := conn.Properties["version"].(string)
	return v, nil
}

// redisVersion is redis_version from INFO server.
func redisVersion(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no redis_version in INFO")
}

// postgresVersion is the server's server_version setting.
func postgresVersion(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}
