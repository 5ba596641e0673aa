// Package sdktest holds the tests, examples and benchmarks of package trace
// that record spans and metrics through the OpenTelemetry SDK. It is a
// module of its own, so that the SDK and its exporters stay out of the
// library's requirements: a service that requires queuey and its trace
// package pulls only the OpenTelemetry API. `make test` runs it with the
// library's tests.
package sdktest
