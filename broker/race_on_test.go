//go:build race

package broker_test

// raceEnabled: under the race detector sync.Pool drops what it is given at
// random, so code that reuses pooled buffers (the strict codec's
// validator) allocates now and then.
const raceEnabled = true
