package clocktest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// SeedEnv names the environment variable that seeds every harness whose
// Options.Seed is 0. A failed test logs the line to rerun it with, such as
// "clocktest: seed 42; rerun with QUEUEY_SEED=42".
const SeedEnv = "QUEUEY_SEED"

// seedStream is the second word of the PCG state a seed starts: any
// constant will do, as long as it stays the same.
const seedStream = 0x636c6f636b746573 // "clocktes"

// seedFrom says where a harness's seed came from.
type seedFrom int

const (
	seedRandom seedFrom = iota // picked for this run
	seedEnv                    // SeedEnv
	seedOption                 // Options.Seed
	seedNone                   // Options.Worker.Rand was given: no seed of the harness's
)

// pickSeed is the seed of a harness for opts: Options.Seed, else SeedEnv,
// else a random one.
func pickSeed(opts *Options) (uint64, seedFrom, error) {
	switch {
	case opts.Worker.Rand != nil:
		return 0, seedNone, nil
	case opts.Seed != 0:
		return opts.Seed, seedOption, nil
	}
	if v := os.Getenv(SeedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, seedNone, fmt.Errorf("clocktest: %s=%q is not a seed (a decimal uint64)", SeedEnv, v)
		}
		return seed, seedEnv, nil
	}
	return rand.Uint64(), seedRandom, nil
}

// seeded is the source of randomness that seed starts.
func seeded(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seedStream))
}

// logSeedOnFailure has t log, when it fails, the seed its harness ran
// with and how to run it again with that seed.
func logSeedOnFailure(t testing.TB, seed uint64, from seedFrom) {
	line := seedLine(seed, from)
	if line == "" {
		return
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(line)
		}
	})
}

// seedLine says which seed a harness ran with, and how to run it again
// with that seed; "" when the harness has none.
func seedLine(seed uint64, from seedFrom) string {
	switch from {
	case seedOption:
		return fmt.Sprintf("clocktest: seed %d (Options.Seed)", seed)
	case seedRandom, seedEnv:
		return fmt.Sprintf("clocktest: seed %d; rerun with %s=%d", seed, SeedEnv, seed)
	}
	return ""
}
