//go:build race

package chaos_test

// raceEnabled: the worker program is built with -race too.
const raceEnabled = true
