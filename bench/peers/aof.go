package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// aofAddr is where startAOFRedis starts a Redis of its own, beside the one
// on 6379.
const aofAddr = "127.0.0.1:6380"

// runAsynqAOF is runAsynq on the Redis startAOFRedis started.
func runAsynqAOF(cfg benchConfig) (float64, error) {
	cfg.redisAddr = aofAddr
	return runAsynq(cfg)
}

// startAOFRedis starts a Redis that keeps an append-only file, fsynced
// every second (appendonly yes, appendfsync everysec): what a user who
// must not lose jobs runs. It lives in a temporary directory until stop,
// for the whole run, so that its CPU time is read like the others'.
func startAOFRedis() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "peers-aof-")
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(aofAddr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server with AOF: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	if err := waitListening(aofAddr, 10*time.Second); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// waitListening waits until addr accepts a connection.
func waitListening(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // the server is starting
	}
}
