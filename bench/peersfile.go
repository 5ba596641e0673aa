package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// peersReport is what `bench/peers -json FILE` writes (bench/peers/report.go
// holds the same shape): the load, the versions built and run against,
// and each system's figures per run.
type peersReport struct {
	Command     string            `json:"command"`
	Date        time.Time         `json:"date"`
	Go          string            `json:"go"`
	GOMAXPROCS  int               `json:"gomaxprocs"`
	N           int               `json:"n"`
	Publishers  int               `json:"publishers"`
	Concurrency int               `json:"concurrency"`
	Count       int               `json:"count"`
	Servers     map[string]string `json:"servers"`
	Systems     []peerSystem      `json:"systems"`
}

// peerSystem is one system's runs.
type peerSystem struct {
	Name     string `json:"name"`
	Module   string `json:"module"`
	Version  string `json:"version"`
	Note     string `json:"note"`
	Server   string `json:"server"`
	Rates    series `json:"rates"`
	ServerUs series `json:"server_us_per_job"`
	SelfUs   series `json:"self_us_per_job"`
	Error    string `json:"error,omitempty"`
}

// readPeers reads and checks a peers report.
func readPeers(path string) (*peersReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r peersReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Systems) == 0 {
		return nil, fmt.Errorf("%s: no system in the peers report", path)
	}
	return &r, nil
}

// queuey is the report's queuey system, if it ran and did not fail.
func (r *peersReport) queuey() (peerSystem, bool) {
	for _, s := range r.Systems {
		if s.Name == "queuey" && s.Error == "" && len(s.Rates) > 0 {
			return s, true
		}
	}
	return peerSystem{}, false
}
