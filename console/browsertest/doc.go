// Package browsertest drives the operator's console (package console) in a
// real Chromium, from Go with chromedp: against the memory backend in
// virtual time, and against RabbitMQ. It is a module of its own so that
// the library's requirements do not carry a browser driver. Its tests
// need /usr/bin/chromium (Debian's package; .ci/run installs it) and fail
// without it. Screenshots go under each test's temporary directory.
package browsertest
